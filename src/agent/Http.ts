import { HttpApiBuilder, HttpServerRequest } from "@effect/platform"
import { Effect, Layer, Option } from "effect"
import { Api } from "../Api.js"
import { CurrentUser } from "../auth/Api.js"
import { Auth } from "../auth/Auth.js"
import { AuthenticationLive, withBearerChallenge } from "../auth/Http.js"
import { feature } from "../http/Feature.js"
import { AppConfig } from "../runtime/Config.js"
import { Agent } from "./Agent.js"
import { AgentLoopLive } from "./AgentLoop.js"
import { AgentApi, OptionalAuthentication, Viewer } from "./Api.js"

/** No Authorization header: the public card; a header that does not authenticate: 401. */
const OptionalAuthenticationLive = Layer.effect(
  OptionalAuthentication,
  Effect.map(Auth, (auth) =>
    Effect.gen(function* () {
      const header = (yield* HttpServerRequest.HttpServerRequest).headers.authorization
      if (header === undefined) return Option.none()
      const token = /^Bearer +(\S+)$/i.exec(header.trim())?.[1] ?? ""
      const user = yield* withBearerChallenge(auth.authenticate(token))
      return Option.some(user.address)
    })
  )
)

export const StrategyHttpLive = HttpApiBuilder.group(Api, "strategy", (handlers) =>
  Effect.gen(function* () {
    const agent = yield* Agent
    return handlers
      .handle("put", ({ payload }) => Effect.flatMap(CurrentUser, (user) => agent.putStrategy(user.address, payload)))
      .handle("get", () => Effect.flatMap(CurrentUser, (user) => agent.getStrategy(user.address)))
  })
).pipe(Layer.provide(AuthenticationLive))

/** An account's read; refused for want of a token (no card is public), it says how to authenticate. */
const challengedWhenAnonymous = <A, E extends { readonly _tag: string }, R>(read: Effect.Effect<A, E, R>) =>
  Effect.catchIf(
    read,
    (error) => error._tag === "Unauthorized",
    (refused) => withBearerChallenge(Effect.fail(refused))
  )

const AgentHttpLive = HttpApiBuilder.group(Api, "agent", (handlers) =>
  Effect.gen(function* () {
    const agent = yield* Agent
    return handlers
      .handle("portfolio", () => challengedWhenAnonymous(Effect.flatMap(Viewer, agent.portfolio)))
      .handle("preview", ({ urlParams }) =>
        challengedWhenAnonymous(Effect.flatMap(Viewer, (who) => agent.preview(who, urlParams.at)))
      )
      .handle("decisions", ({ urlParams }) =>
        challengedWhenAnonymous(Effect.flatMap(Viewer, (who) => agent.decisions(who, urlParams)))
      )
      .handle("session", () => agent.session)
  })
).pipe(Layer.provide(OptionalAuthenticationLive))

/** The agent, while AGENT_MODE is dry or live: its endpoints and its loop. */
export const AgentFeature = feature({
  group: AgentApi,
  enabled: Effect.map(AppConfig, (config) => config.agentMode !== "off"),
  live: Layer.merge(AgentHttpLive, AgentLoopLive),
  whenOff: {
    paths: ["/portfolio", "/agent"],
    message: "the agent is off: /portfolio and /agent/* exist with AGENT_MODE=dry or live"
  }
})
