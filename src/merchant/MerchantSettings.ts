/** The merchant's settings: its orders' lifetime, the pay request's wait, the reconciler's pace and leases. */
import { Config } from "effect"
import { durationConfig } from "../runtime/Config.js"

export const merchantSettings = Config.all({
  orderTtl: durationConfig("ORDER_TTL", "30 minutes"),
  reconcileInterval: durationConfig("RECONCILE_INTERVAL", "2 seconds"),
  /** A replica silent this long is dead: its settlements are the reconciler's. It heartbeats thrice as often. */
  reconcileAfter: durationConfig("SETTLEMENT_RECONCILE_AFTER", "6 seconds"),
  /** A settlement unfinished this long means a stuck relayer (a nonce gap, a transaction never mined): /ready says so. */
  stuckAfter: durationConfig("SETTLEMENT_STUCK_AFTER", "2 minutes"),
  /** How long a pay request waits for its settlement's outcome before answering 202 (poll the order). */
  settlementWait: durationConfig("SETTLEMENT_WAIT", "8 seconds")
})

export type MerchantSettings = Config.Config.Success<typeof merchantSettings>
