/**
 * The demo merchant's checkout: create an order, pay it with the signed-in wallet through x402 in
 * the browser, see the receipt and the order's status. A 202 (the settlement's outcome not known
 * yet) is followed by reading the order until it is paid or open again, as the API asks.
 */
import { useSignal } from "@preact/signals"
import type { Order } from "../../src/merchant/Api.js"
import { api, session } from "../account.js"
import { run } from "../api.js"
import { config } from "../config.js"
import { FaucetButton } from "../faucet.js"
import { dateTime, shortHex, usd } from "../format.js"
import type { PaymentOutcome } from "../pay.js"
import { Button, Copyable, ErrorNotice, FieldMessage, ScreenTitle, useAction } from "../ui.js"

/** How long a settling order is followed, and how often it is read meanwhile. */
const SETTLING_READS = 60
const SETTLING_PAUSE_MS = 1_000

const walletName = () => {
  const wallet = session.value?.wallet
  return wallet === undefined ? "your wallet" : wallet.kind === "development" ? "the development key" : wallet.name
}

export const Shop = () => {
  const amount = useSignal("4.20")
  const description = useSignal("Flat white")
  const order = useSignal<Order | undefined>(undefined)
  const receipt = useSignal<PaymentOutcome | undefined>(undefined)
  const creating = useAction()
  const paying = useAction()

  if (!config.merchant) {
    return (
      <section aria-labelledby="screen-title">
        <ScreenTitle>Shop</ScreenTitle>
        <p>The demo merchant is off on this service: it runs when MERCHANT_PAY_TO is set.</p>
      </section>
    )
  }

  const create = (event: Event) => {
    event.preventDefault()
    receipt.value = undefined
    void creating.perform(async () => {
      order.value = await run(
        api().merchant.createOrder({ payload: { amount: amount.value.trim(), description: description.value } })
      )
    })
  }

  const pay = () =>
    paying.perform(async () => {
      const current = order.value
      const signedIn = session.value
      if (current === undefined || signedIn === undefined) return
      const [{ signerFor }, { payOrder }] = await Promise.all([import("../signers.js"), import("../pay.js")])
      const outcome = await payOrder(current.id, await signerFor(signedIn.wallet, signedIn.address))
      receipt.value = outcome
      let latest = await run(api().merchant.getOrder({ path: { id: current.id } }))
      for (let read = 0; latest.status === "settling" && read < SETTLING_READS; read++) {
        await new Promise((resolve) => setTimeout(resolve, SETTLING_PAUSE_MS))
        latest = await run(api().merchant.getOrder({ path: { id: current.id } }))
      }
      order.value = latest
    })

  const amountMessage = creating.error.value?.fields.find((field) => field.field === "amount")?.message
  const descriptionMessage = creating.error.value?.fields.find((field) => field.field === "description")?.message
  const current = order.value
  return (
    <section aria-labelledby="screen-title">
      <ScreenTitle>Shop</ScreenTitle>
      <p>
        The demo merchant sells anything for USD1. Paying signs a transfer authorization with {walletName()}; the
        service settles it on chain.
      </p>
      <form onSubmit={create} noValidate aria-labelledby="order-title">
        <h2 id="order-title">New order</h2>
        <div class="field">
          <label for="order-amount">Amount (USD)</label>
          <input
            id="order-amount"
            inputMode="decimal"
            value={amount.value}
            aria-invalid={amountMessage !== undefined}
            aria-describedby={amountMessage === undefined ? undefined : "order-amount-message"}
            onInput={(event) => (amount.value = (event.target as HTMLInputElement).value)}
          />
          <FieldMessage id="order-amount-message" message={amountMessage} />
        </div>
        <div class="field">
          <label for="order-description">Description</label>
          <input
            id="order-description"
            value={description.value}
            maxLength={500}
            aria-invalid={descriptionMessage !== undefined}
            aria-describedby={descriptionMessage === undefined ? undefined : "order-description-message"}
            onInput={(event) => (description.value = (event.target as HTMLInputElement).value)}
          />
          <FieldMessage id="order-description-message" message={descriptionMessage} />
        </div>
        {amountMessage === undefined && descriptionMessage === undefined ? (
          <ErrorNotice error={creating.error.value} />
        ) : null}
        <div class="actions">
          <button type="submit" disabled={creating.busy.value} aria-busy={creating.busy.value}>
            Create the order
          </button>
        </div>
      </form>
      {current === undefined ? null : (
        <section class="order" aria-labelledby="current-order-title">
          <h2 id="current-order-title">Order {shortHex(current.id, 8)}</h2>
          <dl>
            <div>
              <dt>Amount</dt>
              <dd>{usd(Number(current.amount))} USD1</dd>
            </div>
            <div>
              <dt>Description</dt>
              <dd>{current.description}</dd>
            </div>
            <div>
              <dt>Status</dt>
              <dd>
                <span class="order-status" role="status">
                  {current.status}
                </span>
              </dd>
            </div>
            <div>
              <dt>{current.status === "paid" ? "Created" : "Pay before"}</dt>
              <dd>{dateTime(current.status === "paid" ? current.createdAt : current.expiresAt)}</dd>
            </div>
          </dl>
          {current.status === "open" ? (
            <div class="actions">
              <Button class="primary" busy={paying.busy.value} onClick={pay}>
                Pay {usd(Number(current.amount))} with {walletName()}
              </Button>
            </div>
          ) : null}
          <ErrorNotice error={paying.error.value} />
          {paying.error.value === undefined ? null : <FaucetButton />}
          {receipt.value === undefined ? null : (
            <section class="receipt" aria-labelledby="receipt-title">
              <h3 id="receipt-title">Receipt</h3>
              {receipt.value.status === 202 ? <p>The payment was accepted and is being settled.</p> : <p>Paid.</p>}
              {receipt.value.transaction === undefined ? null : (
                <p>
                  Transaction{" "}
                  <Copyable
                    value={receipt.value.transaction}
                    label="the transaction hash"
                    shown={shortHex(receipt.value.transaction, 10)}
                  />
                </p>
              )}
              {receipt.value.payer === undefined ? null : (
                <p>
                  Paid by{" "}
                  <Copyable
                    value={receipt.value.payer}
                    label="the payer's address"
                    shown={shortHex(receipt.value.payer)}
                  />
                </p>
              )}
              {receipt.value.network === undefined ? null : <p class="small-print">Network {receipt.value.network}</p>}
            </section>
          )}
        </section>
      )}
    </section>
  )
}
