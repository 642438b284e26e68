/**
 * The card's spending allowance, as pure rules: the EIP-2612 permit a holder signs once for the card
 * program's settlement account (a cap and a deadline), and what it leaves for card payments.
 *
 * On chain a permit sets an ERC-20 allowance that lasts until the holder changes it; its deadline only
 * bounds when the signature may be submitted. The program makes the deadline the allowance's end
 * too: past it the allowance is `expired` and no card payment counts on it (docs/cards.md says why
 * that is the program's promise, not the token's). Amounts are millionths of a dollar, times ms.
 */

/**
 * none: never signed (or signed for another settlement account); pending: submitted, not yet seen
 * on chain; active: seen on chain and in force; revoked: the holder took it back on chain
 * (`approve(spender, 0)`); expired: its deadline passed.
 */
export const ALLOWANCE_STATES = ["none", "pending", "active", "revoked", "expired"] as const
export type AllowanceState = (typeof ALLOWANCE_STATES)[number]

/** The holder's latest submitted permit, as the program recorded it. */
export interface SignedAllowance {
  readonly cap: bigint
  readonly deadline: number
  /** Whether the token was seen allowing the cap after it was submitted. */
  readonly seenOnChain: boolean
  /** Whether it names the program's settlement account now in force. */
  readonly forThisProgram: boolean
}

export const allowanceState = (input: {
  readonly signed: SignedAllowance | undefined
  /** What the token allows the settlement account to take from the card wallet, as last read. */
  readonly onChain: bigint
  readonly now: number
}): AllowanceState => {
  const { signed } = input
  if (signed === undefined || !signed.forThisProgram) return "none"
  if (input.now >= signed.deadline) return "expired"
  if (!signed.seenOnChain) return "pending"
  return input.onChain === 0n ? "revoked" : "active"
}

/** The smaller of two amounts. */
export const lesser = (a: bigint, b: bigint) => (a < b ? a : b)

/** What the card has committed that the settlement account will take: open holds and cleared amounts not debited. */
export interface Commitments {
  readonly held: bigint
  readonly clearedPending: bigint
}

/**
 * The allowance's use and what is left for the next card payment. Used: what the settlement account
 * took already (the cap less what the token still allows, within the cap) and what the card has
 * committed. Remaining: the rest, only while the allowance is active.
 */
export const allowanceFigures = (input: {
  readonly state: AllowanceState
  readonly cap: bigint
  readonly onChain: bigint
  readonly committed: Commitments
}): { readonly used: bigint; readonly remaining: bigint } => {
  const committed = input.committed.held + input.committed.clearedPending
  const allowed = lesser(input.onChain, input.cap)
  const taken = input.state === "active" ? input.cap - allowed : 0n
  const left = allowed - committed
  return {
    used: taken + committed,
    remaining: input.state === "active" && left > 0n ? left : 0n
  }
}
