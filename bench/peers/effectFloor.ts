/**
 * Peer of the read and health benchmarks: the design card's stack with nothing of the service's
 * on it, written as its documentation shows (an `HttpApi` of two endpoints served by
 * `HttpApiBuilder` on `@effect/platform-node`'s server, an `@effect/sql-pg` pool of 10 and a
 * `SqlSchema.findOne` read). No middleware, no metrics, no logging, no body checks. `GET /health`
 * answers a constant JSON; `GET /merchant/orders/{id}` runs the same SELECT as the bare peer on the
 * same database and answers the same JSON shape (404 with `{error, code}` for an unknown order).
 *
 * What it measures: the floor a service on this stack stands on. The service's distance to it is
 * its own code; the floor's distance to the bare `node:http` + `pg` peer is the stack's.
 *
 * Run by the benchmark as plain JavaScript (see harness.ts): packages, and pure modules of src/.
 * Environment: PORT, DATABASE_URL.
 */
import { createServer } from "node:http"
import { HttpApi, HttpApiBuilder, HttpApiEndpoint, HttpApiGroup, HttpApiSchema } from "@effect/platform"
import { NodeHttpServer, NodeRuntime } from "@effect/platform-node"
import { SqlSchema } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Config, Effect, Layer, Option, Schema } from "effect"
import { orderFields } from "../../src/merchant/OrderJson.js"

const Order = Schema.Struct({
  id: Schema.String,
  amount: Schema.String,
  description: Schema.String,
  status: Schema.String,
  payer: Schema.optional(Schema.String),
  tx: Schema.optional(Schema.String),
  createdAt: Schema.Number,
  expiresAt: Schema.Number
})

const OrderRow = Schema.Struct({
  id: Schema.String,
  amount: Schema.String,
  description: Schema.String,
  status: Schema.String,
  payer: Schema.NullOr(Schema.String),
  tx: Schema.NullOr(Schema.String),
  createdAt: Schema.DateFromSelf,
  expiresAt: Schema.DateFromSelf
})

class OrderNotFound extends Schema.TaggedError<OrderNotFound>()(
  "OrderNotFound",
  { error: Schema.String, code: Schema.Literal("ORDER_NOT_FOUND") },
  HttpApiSchema.annotations({ status: 404 })
) {}

const Api = HttpApi.make("floor").add(
  HttpApiGroup.make("floor")
    .add(HttpApiEndpoint.get("health", "/health").addSuccess(Schema.Struct({ status: Schema.String })))
    .add(
      HttpApiEndpoint.get("order", "/merchant/orders/:id")
        .setPath(Schema.Struct({ id: Schema.String }))
        .addSuccess(Order)
        .addError(OrderNotFound)
    )
)

const FloorLive = HttpApiBuilder.group(Api, "floor", (handlers) =>
  Effect.gen(function* () {
    const sql = yield* PgClient.PgClient
    const findOrder = SqlSchema.findOne({
      Request: Schema.String,
      Result: OrderRow,
      execute: (id) => sql`SELECT * FROM orders WHERE id = ${id}`
    })
    return handlers
      .handle("health", () => Effect.succeed({ status: "ok" }))
      .handle("order", ({ path }) =>
        findOrder(path.id).pipe(
          Effect.orDie,
          Effect.flatMap(
            Option.match({
              onNone: () => Effect.fail(new OrderNotFound({ error: `no order ${path.id}`, code: "ORDER_NOT_FOUND" })),
              onSome: (row) => Effect.succeed(orderFields(row))
            })
          )
        )
      )
  })
)

const Database = PgClient.layerConfig({
  url: Config.redacted("DATABASE_URL"),
  maxConnections: Config.succeed(10),
  transformResultNames: Config.succeed((name: string) => name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase()))
})

const Server = HttpApiBuilder.serve().pipe(
  Layer.provide(HttpApiBuilder.api(Api).pipe(Layer.provide(FloorLive), Layer.provide(Database))),
  Layer.provide(NodeHttpServer.layer(createServer, { port: Number(process.env.PORT), host: "127.0.0.1" }))
)

NodeRuntime.runMain(Layer.launch(Server))
