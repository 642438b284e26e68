/**
 * The Order's JSON as the API answers it, from a stored order: `payer` and `tx` only once known,
 * times in ms since the epoch. The shape in one place: `Merchant` answers it, and the benchmarks'
 * peers (bench/peers/) answer the same bytes with the same function. Pure, and imports nothing: a
 * peer bundles it as it is.
 */
export interface StoredOrder<Status extends string = string, Payer extends string = string> {
  readonly id: string
  readonly amount: string
  readonly description: string
  readonly status: Status
  readonly payer: Payer | null
  readonly tx: string | null
  readonly createdAt: Date
  readonly expiresAt: Date
}

export const orderFields = <Status extends string, Payer extends string>(order: StoredOrder<Status, Payer>) => ({
  id: order.id,
  amount: order.amount,
  description: order.description,
  status: order.status,
  ...(order.payer === null ? {} : { payer: order.payer }),
  ...(order.tx === null ? {} : { tx: order.tx }),
  createdAt: order.createdAt.getTime(),
  expiresAt: order.expiresAt.getTime()
})
