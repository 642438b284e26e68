/**
 * The card's spending allowance on the card screen: what card payments may take from the wallet, and
 * the one signature (without gas) that allows them: a cap and a number of days, revocable in the wallet.
 */
import { useSignal } from "@preact/signals"
import { useEffect } from "preact/hooks"
import { api, session } from "./account.js"
import { run } from "./api.js"
import { usd } from "./format.js"
import { Button, ErrorNotice, useAction } from "./ui.js"

type Allowance = Awaited<ReturnType<typeof readAllowance>>

const readAllowance = () => run(api().card.allowance())

/** Reads while the chain has not taken the permit yet: a block or two. */
const PENDING_READS = 40
const PENDING_PAUSE_MS = 500

const summary = (allowance: Allowance) => {
  const until = allowance.deadline === null ? "" : new Date(allowance.deadline).toLocaleDateString()
  switch (allowance.state) {
    case "none":
      return "Card payments need your permission once: sign, without gas, a cap the card may take from your wallet."
    case "pending":
      return "Your permission is on its way to the chain; card payments can use it in a moment."
    case "active":
      return `Card payments may take up to ${usd(allowance.capUsd)} from your wallet until ${until}: ${usd(allowance.usedUsd)} used, ${usd(allowance.remainingUsd)} left.`
    case "revoked":
      return "You took the permission back in your wallet: card payments are declined until you sign a new one."
    case "expired":
      return `Your permission ended on ${until}: card payments are declined until you sign a new one.`
  }
}

export const AllowanceSection = () => {
  const allowance = useSignal<Allowance | undefined>(undefined)
  const cap = useSignal("100")
  const days = useSignal("30")
  const { busy, error, perform } = useAction()

  useEffect(() => {
    void perform(async () => {
      allowance.value = await readAllowance()
    })
  }, [])

  const allow = () =>
    perform(async () => {
      const signedIn = session.value
      if (signedIn === undefined) return
      const { typedData } = await run(
        api().card.requestAllowance({ payload: { capUsd: Number(cap.value), validDays: Number(days.value) } })
      )
      const { signerFor } = await import("./signers.js")
      const signer = await signerFor(signedIn.wallet, signedIn.address)
      const signature = await signer.signTypedData(typedData)
      let latest = await run(api().card.submitAllowance({ payload: { signature } }))
      for (let read = 0; latest.state === "pending" && read < PENDING_READS; read++) {
        await new Promise((resolve) => setTimeout(resolve, PENDING_PAUSE_MS))
        latest = await readAllowance()
      }
      allowance.value = latest
    })

  const current = allowance.value
  return (
    <section aria-labelledby="allowance-title">
      <h2 id="allowance-title">Card payments</h2>
      <p id="allowance-summary" role="status">
        {current === undefined ? "Reading your card's permission…" : summary(current)}
      </p>
      {current === undefined || current.state === "active" || current.state === "pending" ? null : (
        <div class="allowance-form">
          <div class="field">
            <label for="allowance-cap">Most the card may take (USD)</label>
            <input
              id="allowance-cap"
              inputMode="decimal"
              value={cap.value}
              onInput={(event) => (cap.value = (event.target as HTMLInputElement).value)}
            />
          </div>
          <div class="field">
            <label for="allowance-days">For how many days</label>
            <input
              id="allowance-days"
              inputMode="numeric"
              value={days.value}
              onInput={(event) => (days.value = (event.target as HTMLInputElement).value)}
            />
          </div>
          <Button busy={busy.value} onClick={() => void allow()}>
            Allow card payments
          </Button>
          <p class="small-print">
            You sign a permission for USD1, not a payment: nothing moves until a card payment clears, never more than
            the cap, and you can take it back at any time in your wallet.
          </p>
        </div>
      )}
      <ErrorNotice error={error.value} />
    </section>
  )
}
