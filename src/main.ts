/**
 * Entry point: `npm start`. Serves the whole API on embedded defaults when nothing is configured.
 * SIGTERM/SIGINT interrupt the main fiber: the server stops accepting, in-flight requests finish,
 * then the background loops, the database pool and any embedded servers are released in reverse
 * order.
 *
 * The chain's deployment (with nothing configured: the embedded devnet, its anvil started and its
 * contracts checked) needs no database, so it is built beside the database (the embedded
 * PostgreSQL started, the migrations run) rather than after it: a layer is built once per
 * reference, so the ports below find this one already built.
 */
import { Layer } from "effect"
import { httpLive } from "./App.js"
import { ChainDeployment } from "./chain/Deployment.js"
import { NodeServerLive } from "./http/Server.js"
import { launch } from "./lifecycle/Launch.js"
import { ObservabilityLive } from "./observability/Observability.js"
import { PortsLive } from "./Ports.js"
import { AppConfig } from "./runtime/Config.js"
import { SqlLive } from "./storage/Database.js"

const MainLive = httpLive(NodeServerLive).pipe(
  Layer.provide(PortsLive),
  Layer.provide(Layer.merge(SqlLive, ChainDeployment.layer)),
  Layer.provide(ObservabilityLive),
  Layer.provide(AppConfig.layer)
)

launch(MainLive)
