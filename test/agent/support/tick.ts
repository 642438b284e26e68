/**
 * One agent tick at a chosen instant, as its own process: the crash tests SIGKILL it mid-trade.
 * Builds the agent loop over the configured ports and database (the service's own environment
 * variables) and runs `tick(AGENT_TICK_AT)`.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { AgentLoop } from "../../../src/agent/AgentLoop.js"
import { CardDebts } from "../../../src/cards/CardDebts.js"
import { Statement } from "../../../src/cards/Statement.js"
import { AgentEventsLive, DebtEventsLive, Events } from "../../../src/events/Events.js"
import { Market } from "../../../src/market/Market.js"
import { portsLayer } from "../../../src/Ports.js"
import { AppConfig } from "../../../src/runtime/Config.js"
import { SqlLive } from "../../../src/storage/Database.js"

const at = Number(process.env.AGENT_TICK_AT)

const TickLive = AgentLoop.Default.pipe(
  Layer.provide([
    Market.Default,
    Statement.Default,
    CardDebts.Default.pipe(Layer.provide(DebtEventsLive)),
    AgentEventsLive
  ]),
  Layer.provide(Events.Default),
  Layer.provide(portsLayer()),
  Layer.provide(SqlLive),
  Layer.provide(AppConfig.layer)
)

Effect.flatMap(AgentLoop, (loop) => loop.tick(at)).pipe(
  Effect.tap((summary) => Effect.log(`tick done: ${JSON.stringify(summary)}`)),
  Effect.provide(TickLive),
  NodeRuntime.runMain
)
