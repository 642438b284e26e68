/**
 * What the app keeps in the browser's localStorage: the session (bearer token, address, which
 * wallet signed in) and, on the embedded devnet only, the development key. A token there is readable
 * by any script of this origin: the page's policy runs only the app's own bundle (docs/app.md).
 */
const read = <A>(key: string): A | undefined => {
  try {
    const text = localStorage.getItem(key)
    return text === null ? undefined : (JSON.parse(text) as A)
  } catch {
    return undefined
  }
}

const write = (key: string, value: unknown) => {
  if (value === undefined) localStorage.removeItem(key)
  else localStorage.setItem(key, JSON.stringify(value))
}

export const SESSION_KEY = "card-app.session"
const DEV_KEY = "card-app.development-key"

/** Which wallet signed the session in: found again after a reload to sign payments. */
export type WalletChoice =
  | { readonly kind: "development" }
  | { readonly kind: "injected"; readonly rdns: string; readonly name: string }

export interface StoredSession {
  readonly token: string
  readonly address: `0x${string}`
  readonly wallet: WalletChoice
}

export const storedSession = () => read<StoredSession>(SESSION_KEY)
export const storeSession = (session: StoredSession | undefined) => write(SESSION_KEY, session)

export const storedDevelopmentKey = () => read<`0x${string}`>(DEV_KEY)
export const storeDevelopmentKey = (key: `0x${string}` | undefined) => write(DEV_KEY, key)
