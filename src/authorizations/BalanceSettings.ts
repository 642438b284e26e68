/**
 * The settings of the card wallets' balances (docs/cards.md, "The card wallet's balance"): how
 * often the follower looks at the chain, how often it reads every card wallet again, and how old
 * its view may be before an authorization declines `funds_unknown`.
 */
import { Config, Duration } from "effect"
import { durationConfig } from "../runtime/Config.js"

export const balanceSettings = Config.all({
  /** The pause between two of the follower's looks at the watched head. */
  poll: durationConfig("CARD_BALANCE_POLL", "1 second"),
  /** Every card wallet's balance is read again this often (what following the logs cannot see: a reorg at the same height). */
  refresh: durationConfig("CARD_BALANCE_REFRESH", "1 minute"),
  /** An authorization trusts the balances while the follower checked them this recently. */
  maxAge: durationConfig("CARD_BALANCE_MAX_AGE", "30 seconds")
}).pipe(
  Config.validate({
    message:
      "CARD_BALANCE_MAX_AGE must be longer than CARD_BALANCE_POLL, or every authorization declines funds_unknown",
    validation: ({ maxAge, poll }) => Duration.greaterThan(maxAge, poll)
  })
)
