/**
 * Entry point: `npm start`. Serves the whole API on embedded defaults when nothing is configured.
 * SIGTERM/SIGINT interrupt the main fiber: the server stops accepting, in-flight requests finish,
 * then the background loops, the database pool and any embedded servers are released in reverse
 * order.
 */
import { Layer } from "effect"
import { AppConfig } from "./Config.js"
import { SqlLive } from "./Database.js"
import { launch } from "./Launch.js"
import { ObservabilityLive } from "./Observability.js"
import { PortsLive } from "./Ports.js"
import { httpLive, NodeServerLive } from "./Server.js"

const MainLive = httpLive(NodeServerLive).pipe(
  Layer.provide(PortsLive),
  Layer.provide(SqlLive),
  Layer.provide(ObservabilityLive),
  Layer.provide(AppConfig.layer)
)

launch(MainLive)
