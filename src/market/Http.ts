import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { Api } from "../Api.js"
import { Market } from "./Market.js"

export const MarketHttpLive = HttpApiBuilder.group(Api, "market", (handlers) =>
  Effect.gen(function* () {
    const market = yield* Market
    return handlers
      .handle("status", ({ urlParams }) => market.statusAt(urlParams.at))
      .handle("tokens", () => market.allMarketData)
      .handle("token", ({ path }) => market.tokenMarket(path.token))
  })
)
