/**
 * A merchant's card terminal on the sandbox card network (only while it runs): type a card and an
 * amount, charge, and read the answer in words. It needs no sign-in, as a shop's terminal does not;
 * a signed-in holder can fill in their own card ("Use my card", from GET /me). Each charge is a
 * swipe at `POST /sandbox/card-network/authorizations`, which checks the card's details and asks
 * the issuer (this service) through the production path.
 */
import { useSignal } from "@preact/signals"
import { useEffect, useRef } from "preact/hooks"
import type { SandboxAnswer, SandboxSwipe } from "../../src/authorizations/Api.js"
import { api, me, signedIn } from "../account.js"
import { run } from "../api.js"
import { config } from "../config.js"
import { usd } from "../format.js"
import { Button, ErrorNotice, FieldMessage, ScreenTitle, useAction } from "../ui.js"

type Reason = NonNullable<(typeof SandboxAnswer.Type)["reason"]>

/** Every decline reason as a person reads it (the code itself is never shown), and what to do. */
const DECLINES: Readonly<Record<Reason, { readonly sentence: string; readonly advice?: string }>> = {
  card_verification_failed: {
    sentence: "the card number, expiry date or CVV is wrong.",
    advice: "Check them against the card, then charge again."
  },
  insufficient_funds: {
    sentence: "the card does not hold enough USD1 for this amount.",
    advice: "The card holder can add USD1 to the card's wallet."
  },
  card_frozen: { sentence: "the card is frozen.", advice: "The card holder can unfreeze it." },
  card_canceled: {
    sentence: "the card is canceled: it was replaced by a new one.",
    advice: "Use the holder's new card."
  },
  card_expired: { sentence: "the card has expired." },
  limit_exceeded: { sentence: "the amount is over a spending limit the card holder set." },
  merchant_category_blocked: { sentence: "the card holder blocked payments to this kind of merchant." },
  funds_unknown: {
    sentence: "the card's balance could not be checked just now.",
    advice: "Try again in a few seconds."
  },
  allowance_missing: {
    sentence: "the card holder has not allowed card payments from their wallet.",
    advice: "The card holder can allow them on the card screen."
  },
  allowance_exceeded: {
    sentence: "the amount is more than the card holder allowed card payments to take.",
    advice: "The card holder can sign a higher cap on the card screen."
  },
  stand_in: { sentence: "the card's issuer did not answer in time.", advice: "Try again." }
}

/** Merchant categories (ISO 18245 codes) a terminal can play. */
const CATEGORIES: ReadonlyArray<readonly [mcc: string, name: string]> = [
  ["5814", "Fast food and coffee shops"],
  ["5812", "Restaurants"],
  ["5411", "Grocery stores"],
  ["5541", "Fuel stations"],
  ["5912", "Pharmacies"],
  ["4121", "Taxis and ride sharing"],
  ["5999", "Other shops"],
  ["7995", "Betting and casinos"]
]

/** The form's fields by the payload's paths (the API's messages name them). */
const FIELD_IDS: Readonly<Record<string, string>> = {
  cardNumber: "terminal-number",
  expiry: "terminal-expiry",
  cvv: "terminal-cvv",
  amountUsd: "terminal-amount",
  "merchant.name": "terminal-merchant",
  "merchant.mcc": "terminal-mcc",
  "merchant.country": "terminal-country",
  "merchant.city": "terminal-city"
}

interface Answer {
  readonly id: string
  readonly approved: boolean
  readonly reason: Reason | undefined
  readonly amountUsd: number
  readonly merchant: string
}

/** "9406 1234-5678" → "940612345678"; "$4.50" → "4.50"; "1225" → "12/25": what people type, as the API reads it. */
const digits = (text: string) => text.replace(/[\s-]/g, "")
const amountOf = (text: string) => text.replace(/[\s$,]/g, "")
const expiryOf = (text: string) => {
  const trimmed = text.replace(/\s/g, "")
  return /^\d{4}$/.test(trimmed) ? `${trimmed.slice(0, 2)}/${trimmed.slice(2)}` : trimmed
}

export const Terminal = () => {
  const number = useSignal("")
  const expiry = useSignal("")
  const cvv = useSignal("")
  const amount = useSignal("4.50")
  const merchant = useSignal("Corner Coffee")
  const mcc = useSignal("5814")
  const country = useSignal("USA")
  const city = useSignal("")
  const channel = useSignal<"in_person" | "online">("in_person")
  const answer = useSignal<Answer | undefined>(undefined)
  const filled = useSignal<string | undefined>(undefined)
  const charging = useAction()
  const filling = useAction()
  const answerRegion = useRef<HTMLDivElement>(null)

  const messages = charging.error.value?.fields ?? []
  const messageOf = (field: string) => messages.find((message) => message.field === field)?.message
  const fieldProps = (field: string) => {
    const message = messageOf(field)
    return {
      id: FIELD_IDS[field],
      "aria-invalid": message !== undefined,
      "aria-describedby": message === undefined ? undefined : `${FIELD_IDS[field]}-message`
    }
  }

  // The answer takes the focus (and is announced); a refused value, its field.
  useEffect(() => {
    if (answer.value !== undefined) answerRegion.current?.focus()
  }, [answer.value])
  useEffect(() => {
    const first = messages.find((message) => FIELD_IDS[message.field] !== undefined)
    if (first !== undefined) document.getElementById(FIELD_IDS[first.field]!)?.focus()
  }, [charging.error.value])

  if (!config.cardSandbox) {
    return (
      <section aria-labelledby="screen-title">
        <ScreenTitle>Terminal</ScreenTitle>
        <p>
          The sandbox card network is off on this service: the terminal works only with CARD_NETWORK=sandbox (the
          default).
        </p>
      </section>
    )
  }

  const charge = (event: Event) => {
    event.preventDefault()
    answer.value = undefined
    const swipe: SandboxSwipe = {
      cardNumber: digits(number.value),
      expiry: expiryOf(expiry.value),
      cvv: cvv.value.trim(),
      amountUsd: amountOf(amount.value),
      merchant: {
        name: merchant.value.trim(),
        mcc: mcc.value,
        country: country.value.trim().toUpperCase(),
        ...(city.value.trim() === "" ? {} : { city: city.value.trim() })
      },
      channel: channel.value
    }
    void charging.perform(async () => {
      const result = await run(api().cardSandbox.authorize({ payload: swipe }))
      answer.value = {
        id: result.id,
        approved: result.approved,
        reason: result.reason,
        amountUsd: Number(swipe.amountUsd),
        merchant: swipe.merchant.name
      }
    })
  }

  const useMyCard = () =>
    filling.perform(async () => {
      const account = await run(api().account.me())
      me.value = account
      if (account.card === null) {
        filled.value = "You have no card yet: it is issued when your identity check is approved."
        return
      }
      number.value = account.card.number
      expiry.value = account.card.expiry
      cvv.value = account.card.cvv
      filled.value = `Filled in with your card ending ${account.card.number.slice(-4)}.`
    })

  const current = answer.value
  const decline =
    current === undefined || current.approved
      ? undefined
      : current.reason === undefined
        ? { sentence: "the card's issuer refused it.", advice: undefined }
        : DECLINES[current.reason]
  return (
    <section aria-labelledby="screen-title">
      <ScreenTitle>Terminal</ScreenTitle>
      <p>
        A shop's card terminal on the sandbox card network: type a card and an amount, then charge it. The network
        checks the card's details and asks the card's issuer, this service, as a real payment does. No sign-in needed.
      </p>
      <form onSubmit={charge} noValidate aria-label="Charge a card">
        <div class="field">
          <label for="terminal-amount">Amount (USD)</label>
          <input
            {...fieldProps("amountUsd")}
            inputMode="decimal"
            autoComplete="off"
            value={amount.value}
            onInput={(event) => (amount.value = (event.target as HTMLInputElement).value)}
          />
          <FieldMessage id="terminal-amount-message" message={messageOf("amountUsd")} />
        </div>
        <fieldset>
          <legend>Card</legend>
          {signedIn.value && (me.value?.card ?? null) !== null ? (
            <div class="actions">
              <Button busy={filling.busy.value} onClick={useMyCard}>
                Use my card
              </Button>
              {filled.value === undefined ? null : (
                <p role="status" class="small-print">
                  {filled.value}
                </p>
              )}
            </div>
          ) : null}
          <ErrorNotice error={filling.error.value} />
          <div class="field">
            <label for="terminal-number">Card number</label>
            <input
              {...fieldProps("cardNumber")}
              inputMode="numeric"
              autoComplete="cc-number"
              value={number.value}
              onInput={(event) => (number.value = (event.target as HTMLInputElement).value)}
            />
            <FieldMessage id="terminal-number-message" message={messageOf("cardNumber")} />
          </div>
          <div class="field">
            <label for="terminal-expiry">Expiry date (MM/YY)</label>
            <input
              {...fieldProps("expiry")}
              inputMode="numeric"
              autoComplete="cc-exp"
              placeholder="MM/YY"
              value={expiry.value}
              onInput={(event) => (expiry.value = (event.target as HTMLInputElement).value)}
            />
            <FieldMessage id="terminal-expiry-message" message={messageOf("expiry")} />
          </div>
          <div class="field">
            <label for="terminal-cvv">CVV</label>
            <input
              {...fieldProps("cvv")}
              inputMode="numeric"
              autoComplete="cc-csc"
              maxLength={4}
              value={cvv.value}
              onInput={(event) => (cvv.value = (event.target as HTMLInputElement).value)}
            />
            <FieldMessage id="terminal-cvv-message" message={messageOf("cvv")} />
          </div>
        </fieldset>
        <fieldset>
          <legend>Merchant</legend>
          <div class="field">
            <label for="terminal-merchant">Name</label>
            <input
              {...fieldProps("merchant.name")}
              autoComplete="off"
              maxLength={25}
              value={merchant.value}
              onInput={(event) => (merchant.value = (event.target as HTMLInputElement).value)}
            />
            <FieldMessage id="terminal-merchant-message" message={messageOf("merchant.name")} />
          </div>
          <div class="field">
            <label for="terminal-mcc">Category</label>
            <select
              {...fieldProps("merchant.mcc")}
              value={mcc.value}
              onChange={(event) => (mcc.value = (event.target as HTMLSelectElement).value)}
            >
              {CATEGORIES.map(([code, name]) => (
                <option key={code} value={code}>
                  {name} ({code})
                </option>
              ))}
            </select>
            <FieldMessage id="terminal-mcc-message" message={messageOf("merchant.mcc")} />
          </div>
          <div class="field">
            <label for="terminal-country">Country (ISO code, like USA)</label>
            <input
              {...fieldProps("merchant.country")}
              autoComplete="off"
              maxLength={3}
              value={country.value}
              onInput={(event) => (country.value = (event.target as HTMLInputElement).value)}
            />
            <FieldMessage id="terminal-country-message" message={messageOf("merchant.country")} />
          </div>
          <div class="field">
            <label for="terminal-city">City (optional)</label>
            <input
              {...fieldProps("merchant.city")}
              autoComplete="off"
              maxLength={40}
              value={city.value}
              onInput={(event) => (city.value = (event.target as HTMLInputElement).value)}
            />
            <FieldMessage id="terminal-city-message" message={messageOf("merchant.city")} />
          </div>
          <div class="field">
            <label for="terminal-channel">How the card is used</label>
            <select
              id="terminal-channel"
              value={channel.value}
              onChange={(event) =>
                (channel.value = (event.target as HTMLSelectElement).value === "online" ? "online" : "in_person")
              }
            >
              <option value="in_person">In person, at the counter</option>
              <option value="online">Online</option>
            </select>
          </div>
        </fieldset>
        {messages.length === 0 ? <ErrorNotice error={charging.error.value} /> : null}
        <div class="actions">
          <button type="submit" class="primary" disabled={charging.busy.value} aria-busy={charging.busy.value}>
            Charge
          </button>
        </div>
      </form>
      <div id="terminal-answer" role="status" tabIndex={-1} ref={answerRegion}>
        {current === undefined ? null : current.approved ? (
          <div class="notice">
            <p class="saved">Approved</p>
            <p>
              {usd(current.amountUsd)} at {current.merchant}.
            </p>
            <p class="small-print">Authorization {current.id}</p>
          </div>
        ) : (
          <div class="notice error">
            <p>
              <strong>Declined: {decline?.sentence}</strong>
            </p>
            {decline?.advice === undefined ? null : <p class="advice">{decline.advice}</p>}
            <p class="small-print">Authorization {current.id}</p>
          </div>
        )}
      </div>
    </section>
  )
}
