/**
 * Sign-in: choose an injected wallet (found with EIP-6963) or, only on the embedded devnet, a
 * development key made in this browser; read the sign-in (SIWE) message the service issued; sign
 * it; the service answers a session token.
 */
import { useSignal } from "@preact/signals"
import { useEffect, useRef } from "preact/hooks"
import { api, beginSession, loadMe, me, signInNotice } from "../account.js"
import { run } from "../api.js"
import { config } from "../config.js"
import { shortHex } from "../format.js"
import { navigate } from "../router.js"
import type { Signer } from "../signers.js"
import { Button, ErrorNotice, ScreenTitle, useAction } from "../ui.js"
import { discoverWallets, type InjectedWallet, injectedWallets } from "../wallets.js"

const signers = () => import("../signers.js")

interface Pending {
  readonly signer: Signer
  readonly message: string
  readonly walletName: string
}

/** Where a new session goes: where the person was headed, else the identity check until the card exists. */
const destination = (next: string | undefined) =>
  next?.startsWith("/app/") && next !== "/app/sign-in"
    ? next
    : me.value?.kyc === "approved"
      ? "/app/card"
      : "/app/identity"

export const SignIn = (props: { readonly next?: string }) => {
  const pending = useSignal<Pending | undefined>(undefined)
  const developmentKey = useSignal<string | undefined>(undefined)
  const { busy, error, perform } = useAction()
  const signButton = useRef<HTMLButtonElement>(null)

  useEffect(() => {
    discoverWallets()
    if (config.devnet) void signers().then((module) => (developmentKey.value = module.developmentAddress()))
  }, [])
  // The message is shown: the sign button takes the focus once it is enabled.
  useEffect(() => {
    if (pending.value !== undefined && !busy.value) signButton.current?.focus()
  }, [pending.value, busy.value])

  /** Asks the service for a challenge for the signer's address and shows it. */
  const challenge = (makeSigner: () => Promise<Signer>, walletName: string) =>
    perform(async () => {
      const signer = await makeSigner()
      const { message } = await run(api().auth.challenge({ payload: { address: signer.address } }))
      pending.value = { signer, message, walletName }
    })

  const useInjected = (wallet: InjectedWallet) =>
    challenge(
      async () =>
        (await signers()).injectedSigner(wallet.provider, { kind: "injected", rdns: wallet.rdns, name: wallet.name }),
      wallet.name
    )

  const useDevelopmentKey = () =>
    challenge(async () => {
      const signer = (await signers()).developmentSigner(true)
      if (signer === undefined) throw new Error("Development keys exist only on the embedded devnet.")
      developmentKey.value = signer.address
      return signer
    }, "the development key")

  const sign = () =>
    perform(async () => {
      const current = pending.value
      if (current === undefined) return
      const signature = await current.signer.signMessage(current.message)
      const result = await run(api().auth.verify({ payload: { message: current.message, signature } }))
      beginSession({ token: result.token, address: result.address, wallet: current.signer.choice })
      await loadMe()
      pending.value = undefined
      navigate(destination(props.next), { replace: true })
    })

  const forget = async () => {
    ;(await signers()).forgetDevelopmentKey()
    developmentKey.value = undefined
  }

  if (pending.value !== undefined) {
    return (
      <section aria-labelledby="screen-title">
        <ScreenTitle>Sign in</ScreenTitle>
        <p>
          Sign this message with {pending.value.walletName} ({shortHex(pending.value.signer.address)}) to sign in. It
          costs nothing and moves no money; the service checks it once and it expires in 10 minutes.
        </p>
        <h2>The message</h2>
        <pre class="siwe" id="siwe-message">
          {pending.value.message}
        </pre>
        <ErrorNotice error={error.value} />
        <div class="actions">
          <button
            type="button"
            ref={signButton}
            class="primary"
            disabled={busy.value}
            aria-busy={busy.value}
            onClick={sign}
          >
            Sign and sign in
          </button>
          <Button onClick={() => (pending.value = undefined)} disabled={busy.value}>
            Cancel
          </Button>
        </div>
      </section>
    )
  }

  return (
    <section aria-labelledby="screen-title">
      <ScreenTitle>Sign in</ScreenTitle>
      {signInNotice.value === undefined ? null : (
        <p class="notice" role="status">
          {signInNotice.value}
        </p>
      )}
      <p>Sign in with a wallet: you sign a message, no money moves.</p>
      <ErrorNotice error={error.value} />
      <h2>Browser wallets</h2>
      {injectedWallets.value.length === 0 ? (
        <p>No browser wallet was found. A wallet extension that announces itself (EIP-6963) appears here.</p>
      ) : (
        <ul class="wallets">
          {injectedWallets.value.map((wallet) => (
            <li key={wallet.uuid}>
              <Button onClick={() => useInjected(wallet)} busy={busy.value}>
                {wallet.icon === "" ? null : <img src={wallet.icon} alt="" width={24} height={24} />}
                Connect {wallet.name}
              </Button>
            </li>
          ))}
        </ul>
      )}
      {config.devnet ? (
        <div class="development-key">
          <h2>Development key</h2>
          <p>
            <strong>For trying the app on this local devnet only.</strong> The key is made in this browser and kept in
            its storage: anyone using this browser can use it, and it holds nothing of value anywhere else.
          </p>
          <div class="actions">
            <Button class="primary" onClick={useDevelopmentKey} busy={busy.value}>
              {developmentKey.value === undefined
                ? "Use a development key"
                : `Use the development key ${shortHex(developmentKey.value)}`}
            </Button>
            {developmentKey.value === undefined ? null : (
              <Button onClick={forget} disabled={busy.value}>
                Forget the development key
              </Button>
            )}
          </div>
        </div>
      ) : null}
    </section>
  )
}
