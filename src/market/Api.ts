/**
 * The market's HTTP contract and wire schemas: `MarketStatus`, `MarketData` (the seed's "Market data"
 * object, also used inside portfolio holdings) and the public market endpoints.
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { ParseResult, Schema } from "effect"
import { Address } from "../chain/Address.js"
import { ApiError, NotFound } from "../http/ApiError.js"
import { withFieldMessages } from "../http/FieldMessages.js"

export class PriceUnavailable extends ApiError(
  "PriceUnavailable",
  "PRICE_UNAVAILABLE",
  502,
  "The token's price feed did not answer in time and no recent price is cached."
) {}

export const MarketStatus = Schema.Struct({
  openState: Schema.Boolean.annotations({ description: "whether the token can trade now on its platform" }),
  marketStatus: Schema.NullOr(
    Schema.Literal("premarket", "regular", "postmarket", "overnight", "closed", "offhours", "pause", "paused")
  ),
  reasonCode: Schema.NullOr(Schema.String).annotations({
    description: "TRADING, MARKET_CLOSED, HOLIDAY, WEEKEND, ASSET_PAUSED, ..."
  }),
  nextOpenTime: Schema.NullOr(Schema.Number).annotations({
    description: "start of the next regular session strictly after now, ms since epoch"
  }),
  nextCloseTime: Schema.NullOr(Schema.Number).annotations({
    description: "end of the current regular session, or of the next one, ms since epoch"
  })
}).annotations({ identifier: "MarketStatus" })

export const CloseRef = Schema.Struct({
  price: Schema.Number.annotations({ description: "USD per token, the last price seen in the regular session" }),
  at: Schema.Number.annotations({ description: "when that price was observed, ms since epoch" })
}).annotations({ identifier: "CloseRef" })
export type CloseRef = typeof CloseRef.Type

export const MarketData = Schema.Struct({
  ticker: Schema.String,
  platform: Schema.String,
  status: MarketStatus,
  tokenPrice: Schema.Number.annotations({ description: "USD per token" }),
  closeRef: Schema.NullOr(CloseRef),
  spreadVsClose: Schema.NullOr(Schema.Number).annotations({
    description: "tokenPrice / closeRef.price - 1; null without a close reference"
  })
}).annotations({ identifier: "MarketData" })
export type MarketData = typeof MarketData.Type

export const TokenMarket = Schema.Struct({
  symbol: Schema.String,
  address: Address,
  ticker: Schema.String,
  platform: Schema.String,
  market: Schema.NullOr(MarketData).annotations({ description: "null while the token's price is unavailable" })
}).annotations({ identifier: "TokenMarket" })
export type TokenMarket = typeof TokenMarket.Type

/** The latest instant the calendar answers for (9999-12-31T23:59:59.999Z). */
export const MAX_INSTANT = 253_402_300_799_999

const ISO_DATE_TIME =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(?:(Z)|([+-])(\d{2}):?(\d{2}))$/i
const MS = /^\d{1,15}$/

/** 2000 is a leap year, so February has 29 days there; this corrects it for `year`. */
const leapDay = (year: number) => ((year % 4 === 0 && year % 100 !== 0) || year % 400 === 0 ? 0 : -1)

/**
 * An instant given as ms since epoch (digits) or as an ISO-8601 date-time with a zone (`Z` or
 * `±hh:mm`), between 1970 and 9999; none when malformed or out of range. A `+` sent unencoded in a
 * query string arrives as a space and is read as `+`.
 */
export const parseInstant = (text: string): number | undefined => {
  if (MS.test(text)) {
    const ms = Number(text)
    return ms <= MAX_INSTANT ? ms : undefined
  }
  const m = ISO_DATE_TIME.exec(text.replace(/ (\d{2}:?\d{2})$/, "+$1"))
  if (m === null) return undefined
  const [year, month, day, hour, minute] = [m[1], m[2], m[3], m[4], m[5]].map(Number) as [
    number,
    number,
    number,
    number,
    number
  ]
  const second = Number(m[6] ?? 0)
  const millis = Number((m[7] ?? "0").padEnd(3, "0").slice(0, 3))
  const offsetMinutes = m[8] !== undefined ? 0 : (m[9] === "-" ? -1 : 1) * (Number(m[10]) * 60 + Number(m[11]))
  const daysInMonth = new Date(Date.UTC(2000, month, 0)).getUTCDate() + (month === 2 ? leapDay(year) : 0)
  const valid =
    year >= 1970 &&
    month >= 1 &&
    month <= 12 &&
    day >= 1 &&
    day <= daysInMonth &&
    hour <= 23 &&
    minute <= 59 &&
    second <= 59 &&
    Number(m[10] ?? 0) <= 23 &&
    Number(m[11] ?? 0) <= 59
  if (!valid) return undefined
  const ms = Date.UTC(year, month - 1, day, hour, minute, second, millis) - offsetMinutes * 60_000
  return ms >= 0 && ms <= MAX_INSTANT ? ms : undefined
}

const Instant = Schema.transformOrFail(Schema.String, Schema.Number, {
  strict: true,
  decode: (text, _, ast) => {
    const ms = parseInstant(text)
    return ms === undefined ? ParseResult.fail(new ParseResult.Type(ast, text)) : ParseResult.succeed(ms)
  },
  encode: (ms) => ParseResult.succeed(String(ms))
}).annotations({
  description: "ISO-8601 date-time with a zone, or milliseconds since epoch",
  message: () => "must be an ISO-8601 date-time with a zone (2026-11-27T17:59:00Z) or milliseconds since epoch"
})

/** `?at=`: the instant a read is about; absent, now. */
export const AtQuery = Schema.Struct({ at: Schema.optionalWith(Instant, { exact: true }) })

export class MarketApi extends HttpApiGroup.make("market")
  .add(
    HttpApiEndpoint.get("status", "/market/status")
      .setUrlParams(withFieldMessages(AtQuery))
      .addSuccess(MarketStatus)
      .annotate(OpenApi.Summary, "US market status")
      .annotate(
        OpenApi.Description,
        "The US equity calendar's MarketStatus at `at` (ISO-8601 with a zone, or ms since epoch; default now). " +
          "Calendar only: token-level states such as ASSET_PAUSED appear in /market/tokens."
      )
  )
  .add(
    HttpApiEndpoint.get("tokens", "/market/tokens")
      .addSuccess(Schema.Array(TokenMarket))
      .annotate(OpenApi.Summary, "Stock tokens and their market data")
      .annotate(
        OpenApi.Description,
        "Every known stock token with its market data (null while its price is unavailable)."
      )
  )
  .add(
    HttpApiEndpoint.get("token", "/market/tokens/:token")
      .setPath(
        withFieldMessages(
          Schema.Struct({ token: Schema.String.annotations({ description: "symbol or token address" }) })
        )
      )
      .addSuccess(TokenMarket)
      .addError(NotFound.wire)
      .addError(PriceUnavailable.wire)
      .annotate(OpenApi.Summary, "One stock token's market data")
      .annotate(OpenApi.Description, "One token's market data, by symbol (any case) or address.")
  )
  .annotate(OpenApi.Title, "Market")
  .annotate(
    OpenApi.Description,
    "The US equity calendar (sessions, holidays, early closes) and the stock tokens' prices and trading states."
  ) {}
