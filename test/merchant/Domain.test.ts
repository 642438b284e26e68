import { describe, expect, it } from "@effect/vitest"
import { Cause, ConfigProvider, Effect, Exit, Layer } from "effect"
import { ChainDeployment } from "../../src/chain/Deployment.js"
import { EvmChain } from "../../src/chain/EvmChain.js"
import { Events } from "../../src/events/Events.js"
import { Merchant } from "../../src/merchant/Merchant.js"
import { RelayerProcessor } from "../../src/merchant/PaymentProcessor.js"
import { AppConfig } from "../../src/runtime/Config.js"
import { TestDevnetDeployment } from "../support/TestChain.js"
import { TestDatabase } from "../support/TestDatabase.js"

/** The merchant over the test devnet, announcing the given EIP-712 domain for USD1. */
const merchantWithDomain = (name: string, version: string) =>
  Merchant.Default.pipe(
    Layer.provide([RelayerProcessor, Events.Default]),
    Layer.provide(EvmChain),
    Layer.provide(
      Layer.effect(
        ChainDeployment,
        Effect.map(ChainDeployment, (deployment) => ({ ...deployment, usd1: { ...deployment.usd1, name, version } }))
      ).pipe(Layer.provide(TestDevnetDeployment))
    ),
    Layer.provide(TestDatabase),
    Layer.provide(AppConfig.layer),
    Layer.provide(
      Layer.setConfigProvider(
        ConfigProvider.fromMap(new Map([["MERCHANT_PAY_TO", "0x000000000000000000000000000000000000dEaD"]]))
      )
    )
  )

describe("the announced USD1 EIP-712 domain", () => {
  it.live("matching the token's DOMAIN_SEPARATOR, the merchant starts", () =>
    Effect.gen(function* () {
      const exit = yield* Effect.exit(Layer.build(merchantWithDomain("World Liberty Financial USD", "1")))
      expect(Exit.isSuccess(exit)).toBe(true)
    }).pipe(Effect.scoped)
  )

  it.live("not matching it, start-up fails with a message naming the settings", () =>
    Effect.gen(function* () {
      for (const [name, version] of [
        ["USD Coin", "1"],
        ["World Liberty Financial USD", "2"]
      ] as const) {
        const exit = yield* Effect.exit(Layer.build(merchantWithDomain(name, version)))
        expect(Exit.isFailure(exit)).toBe(true)
        if (Exit.isFailure(exit)) expect(Cause.pretty(exit.cause)).toContain("USD1_EIP712_NAME/USD1_EIP712_VERSION")
      }
    }).pipe(Effect.scoped)
  )
})
