/**
 * Injected wallets, found with EIP-6963: the page asks (`eip6963:requestProvider`) and every wallet
 * extension answers with its name, icon, reverse-DNS id and EIP-1193 provider
 * (`eip6963:announceProvider`), also one that loads after the page.
 */
import { signal } from "@preact/signals"

export interface Eip1193Provider {
  readonly request: (args: { readonly method: string; readonly params?: unknown }) => Promise<unknown>
}

export interface InjectedWallet {
  readonly uuid: string
  readonly name: string
  /** A data: URI image. */
  readonly icon: string
  readonly rdns: string
  readonly provider: Eip1193Provider
}

interface AnnounceDetail {
  readonly info?: { readonly uuid?: unknown; readonly name?: unknown; readonly icon?: unknown; readonly rdns?: unknown }
  readonly provider?: Eip1193Provider
}

export const injectedWallets = signal<ReadonlyArray<InjectedWallet>>([])

window.addEventListener("eip6963:announceProvider", (event) => {
  const { info, provider } = ((event as CustomEvent).detail ?? {}) as AnnounceDetail
  if (info === undefined || provider === undefined || typeof provider.request !== "function") return
  const { uuid, name, icon, rdns } = info
  if (typeof uuid !== "string" || typeof name !== "string" || typeof rdns !== "string") return
  if (injectedWallets.value.some((wallet) => wallet.uuid === uuid)) return
  const wallet: InjectedWallet = {
    uuid,
    name,
    rdns,
    // Only an image as a data: URI is shown (the page loads nothing from elsewhere).
    icon: typeof icon === "string" && icon.startsWith("data:image/") ? icon : "",
    provider
  }
  injectedWallets.value = [...injectedWallets.value, wallet]
})

/** Asks every injected wallet to announce itself (again). */
export const discoverWallets = () => window.dispatchEvent(new Event("eip6963:requestProvider"))
