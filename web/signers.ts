/**
 * Who signs: a development key held in this browser (embedded devnet only) or an injected EIP-1193
 * wallet, behind one interface. The sign-in message is signed with `personal_sign`, a payment's
 * EIP-3009 authorization with `eth_signTypedData_v4` (viem's wallet client speaks both). Loaded on
 * demand: the signing code is a chunk of its own.
 */
import { createWalletClient, custom, type Hex } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { config } from "./config.js"
import { storeDevelopmentKey, storedDevelopmentKey, type WalletChoice } from "./storage.js"
import { type Eip1193Provider, injectedWallets } from "./wallets.js"

export interface TypedDataToSign {
  readonly domain: Record<string, unknown>
  readonly types: Record<string, unknown>
  readonly primaryType: string
  readonly message: Record<string, unknown>
}

export interface Signer {
  readonly address: `0x${string}`
  readonly choice: WalletChoice
  readonly signMessage: (message: string) => Promise<Hex>
  readonly signTypedData: (data: TypedDataToSign) => Promise<Hex>
}

/** The development key of this browser, made now unless one is kept. Only on the embedded devnet. */
export const developmentSigner = (create: boolean): Signer | undefined => {
  if (!config.devnet) return undefined
  let key = storedDevelopmentKey()
  if (key === undefined) {
    if (!create) return undefined
    key = generatePrivateKey()
    storeDevelopmentKey(key)
  }
  const account = privateKeyToAccount(key)
  return {
    address: account.address,
    choice: { kind: "development" },
    signMessage: (message) => account.signMessage({ message }),
    signTypedData: (data) => account.signTypedData(data as Parameters<typeof account.signTypedData>[0])
  }
}

/** The development key's address, if this browser keeps one. */
export const developmentAddress = () => developmentSigner(false)?.address

export const forgetDevelopmentKey = () => storeDevelopmentKey(undefined)

/** Makes sure the wallet is on the service's chain before it signs typed data for it. */
const onServiceChain = async (provider: Eip1193Provider) => {
  const current = await provider.request({ method: "eth_chainId" })
  if (typeof current === "string" && Number.parseInt(current, 16) === config.chainId) return
  await provider.request({
    method: "wallet_switchEthereumChain",
    params: [{ chainId: `0x${config.chainId.toString(16)}` }]
  })
}

/** An injected wallet's first account, after the person allows this page (`eth_requestAccounts`). */
export const injectedSigner = async (provider: Eip1193Provider, choice: WalletChoice): Promise<Signer> => {
  const accounts = (await provider.request({ method: "eth_requestAccounts" })) as ReadonlyArray<`0x${string}`>
  const address = accounts[0]
  if (address === undefined) throw new Error("The wallet shared no account.")
  const wallet = createWalletClient({ account: address, transport: custom(provider) })
  return {
    address,
    choice,
    signMessage: (message) => wallet.signMessage({ account: address, message }),
    signTypedData: async (data) => {
      await onServiceChain(provider)
      return wallet.signTypedData({
        account: address,
        ...(data as Omit<Parameters<typeof wallet.signTypedData>[0], "account">)
      })
    }
  }
}

/** The signer a session was made with, found again (after a reload) to sign a payment for `address`. */
export const signerFor = async (choice: WalletChoice, address: string): Promise<Signer> => {
  let signer: Signer | undefined
  if (choice.kind === "development") {
    signer = developmentSigner(false)
    if (signer === undefined) throw new Error("This browser no longer holds the development key: sign in again.")
  } else {
    const wallet = injectedWallets.value.find((found) => found.rdns === choice.rdns)
    if (wallet === undefined) throw new Error(`${choice.name} is not available in this browser now.`)
    signer = await injectedSigner(wallet.provider, choice)
  }
  if (signer.address.toLowerCase() !== address.toLowerCase()) {
    throw new Error(
      `The wallet's account is ${signer.address}, not the signed-in ${address}: switch accounts, or sign in again.`
    )
  }
  return signer
}
