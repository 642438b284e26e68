/**
 * The one mechanism for the parts of the API that exist only when switched on by configuration or
 * by the ports in force (the demo merchant, the agent, the devnet faucet, the sandbox card network).
 * A part declares itself once, beside its handlers, with `feature`: its HttpApi group, its switch,
 * what runs while it is on (its handlers, and beside them its loops and readiness checks) and what
 * a request under its paths is told while it is off. The app adds the declarations to its core API
 * with `withFeature`; the API served (and so its OpenAPI document), the handlers built and the 404s
 * of the parts switched off all follow from them, read once at start.
 */
import { HttpApi, HttpApiBuilder, HttpApiGroup } from "@effect/platform"
import { Effect, Layer } from "effect"

/** What a request under a switched-off part's paths is told, instead of "no route". */
export interface SwitchedOff {
  /** Each path, and everything under it. */
  readonly paths: ReadonlyArray<string>
  /** The 404's message: what is off, and how to switch it on. */
  readonly message: string
}

/** A part of the API `ApiId` served only while `enabled` says so. */
export interface Feature<ApiId extends string, Group extends HttpApiGroup.HttpApiGroup.Any, E, R> {
  /** Its endpoints: served, and in the OpenAPI document, only while it is on. */
  readonly group: Group
  /** Whether it is on; read once, at start. */
  readonly enabled: Effect.Effect<boolean, E, R>
  /** Its group's handlers and whatever runs beside them (loops, readiness checks): built only while it is on. */
  readonly live: Layer.Layer<HttpApiGroup.ApiGroup<ApiId, Group["identifier"]>, E, R>
  /** What a request under its paths is told while it is off; without it, the plain "no route". */
  readonly whenOff?: SwitchedOff | undefined
}

export const feature = <
  ApiId extends string,
  Group extends HttpApiGroup.HttpApiGroup.Any,
  SE,
  SR,
  LE,
  LR
>(declaration: {
  readonly group: Group
  readonly enabled: Effect.Effect<boolean, SE, SR>
  readonly live: Layer.Layer<HttpApiGroup.ApiGroup<ApiId, Group["identifier"]>, LE, LR>
  readonly whenOff?: SwitchedOff
}): Feature<ApiId, Group, SE | LE, SR | LR> => declaration

/** The API in force so far, with the layer of the parts on (`Served`: their groups' handlers). */
export interface InForce<Id extends string, Groups extends HttpApiGroup.HttpApiGroup.Any, E, R, Served, LE, LR> {
  /** The API served: the core's groups, then those of the parts on, in the order added. */
  readonly api: HttpApi.HttpApi<Id, Groups, E, R>
  readonly live: Layer.Layer<Served, LE, LR>
  readonly switchedOff: ReadonlyArray<SwitchedOff>
}

/** The core API, always served, before any part is added. */
export const apiInForce = <Id extends string, Groups extends HttpApiGroup.HttpApiGroup.Any, E, R>(
  core: HttpApi.HttpApi<Id, Groups, E, R>
): Effect.Effect<InForce<Id, Groups, E, R, never, never, never>> =>
  Effect.succeed({ api: core, live: Layer.empty, switchedOff: [] })

/**
 * Where a switched-off part's handlers would be: no route. The API's type names every part's group
 * whichever are on (one type for every combination), so HttpApi asks for each group's handlers; an
 * empty group of the same name answers for it, registering nothing.
 */
const noRoutes = <const ApiId extends string, const Name extends string>(apiId: ApiId, name: Name) =>
  HttpApiBuilder.group(HttpApi.make(apiId).add(HttpApiGroup.make(name)), name, (handlers) => handlers)

/** Adds a part to the API in force: its group and its layer while it is on, its 404 while it is off. */
export const withFeature =
  <Id extends string, Group extends HttpApiGroup.HttpApiGroup.Any, FE, FR>(part: Feature<Id, Group, FE, FR>) =>
  <Groups extends HttpApiGroup.HttpApiGroup.Any, E, R, Served, LE, LR, XE, XR>(
    self: Effect.Effect<InForce<Id, Groups, E, R, Served, LE, LR>, XE, XR>
  ) =>
    Effect.zipWith(
      self,
      part.enabled,
      (
        { api, live, switchedOff },
        on
      ): InForce<
        Id,
        Groups | Group,
        E,
        R,
        Served | HttpApiGroup.ApiGroup<Id, Group["identifier"]>,
        LE | FE,
        LR | FR
      > => {
        // Typed with the part's group either way: an API without it is one of fewer groups.
        const served: HttpApi.HttpApi<Id, Groups | Group, E, R> = on ? api.add(part.group) : api
        return {
          api: served,
          live: Layer.merge(live, on ? part.live : noRoutes(api.identifier, part.group.identifier)),
          switchedOff: on || part.whenOff === undefined ? switchedOff : [...switchedOff, part.whenOff]
        }
      }
    )
