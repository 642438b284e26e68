/**
 * What the service tells the page about itself, in the page's `#app-config` data block (not a
 * script: the page's policy runs none inline): which parts are on (the merchant, the agent, the
 * sandbox card network) and whether the embedded devnet runs (then, and only then, a development
 * key can be made in the browser).
 */
export interface AppConfig {
  /** The embedded devnet runs: development keys and the devnet faucet exist. */
  readonly devnet: boolean
  /** The demo merchant is on (MERCHANT_PAY_TO). */
  readonly merchant: boolean
  /** AGENT_MODE: the agent's portfolio, decisions and preview exist unless `off`. */
  readonly agent: "off" | "dry" | "live"
  /** The chain's id: sign-in messages and payments are for it. */
  readonly chainId: number
  /** The sandbox card network runs (CARD_NETWORK=sandbox): the terminal can swipe cards at it. */
  readonly cardSandbox: boolean
}

const read = (): AppConfig => {
  const text = document.getElementById("app-config")?.textContent ?? "{}"
  const given = JSON.parse(text) as Partial<AppConfig>
  return {
    devnet: given.devnet === true,
    merchant: given.merchant === true,
    agent: given.agent ?? "off",
    chainId: given.chainId ?? 1,
    cardSandbox: given.cardSandbox === true
  }
}

export const config: AppConfig = read()
