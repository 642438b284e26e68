/** The card: holder, number (masked until revealed), expiry, CVV (hidden until revealed), USD1 balance, live. */
import { useSignal } from "@preact/signals"
import { cardBalance, me } from "../account.js"
import { AllowanceSection } from "../allowance.js"
import { FaucetButton } from "../faucet.js"
import { grouped, maskedNumber, usd } from "../format.js"
import { liveState } from "../live.js"
import { Link } from "../router.js"
import { ScreenTitle } from "../ui.js"

/** A secret of the card, hidden until its button shows it. */
const Reveal = (props: {
  readonly id: string
  readonly what: string
  readonly shown: string
  readonly hidden: string
}) => {
  const revealed = useSignal(false)
  return (
    <>
      <span id={props.id}>{revealed.value ? props.shown : props.hidden}</span>
      <button
        type="button"
        class="small on-dark"
        aria-controls={props.id}
        onClick={() => (revealed.value = !revealed.value)}
      >
        {revealed.value ? `Hide ${props.what}` : `Show ${props.what}`}
      </button>
    </>
  )
}

export const CardScreen = () => {
  const card = me.value?.card
  if (card === undefined || card === null) {
    return (
      <section aria-labelledby="screen-title">
        <ScreenTitle>Card</ScreenTitle>
        <p>You have no card yet: it is issued when your identity check is approved.</p>
        <Link class="button primary" href="/app/identity">
          Go to the identity check
        </Link>
      </section>
    )
  }
  return (
    <section aria-labelledby="screen-title">
      <ScreenTitle>Card</ScreenTitle>
      <section class="card-face" aria-label="Your card">
        <dl>
          <div>
            <dt>Card holder</dt>
            <dd class="holder">{card.holder}</dd>
          </div>
          <div>
            <dt>Card number</dt>
            <dd class="number">
              <Reveal id="card-number" what="number" shown={grouped(card.number)} hidden={maskedNumber(card.number)} />
            </dd>
          </div>
        </dl>
        <dl class="pair">
          <div>
            <dt>Expires</dt>
            <dd>{card.expiry}</dd>
          </div>
          <div>
            <dt>CVV</dt>
            <dd>
              <Reveal id="card-cvv" what="CVV" shown={card.cvv} hidden="•••" />
            </dd>
          </div>
        </dl>
      </section>
      <h2>Balance</h2>
      <p class="balance" aria-live="polite">
        <span id="card-balance">{cardBalance.value === undefined ? "—" : usd(cardBalance.value)}</span> USD1
      </p>
      <p class="small-print">
        {liveState.value === "open"
          ? "Updated live as payments and refills settle."
          : "The balance appears once the live updates are connected."}
      </p>
      <FaucetButton />
      <AllowanceSection />
    </section>
  )
}
