/**
 * An HttpApi group served only when a part is on (the embedded devnet's faucet, the sandbox card
 * network): the API in force with the group, or without it. Typed as holding it either way, as the
 * group's handlers' layer is always provided and registers them only then.
 */
import type { HttpApi, HttpApiGroup } from "@effect/platform"

export const withGroupWhen = <
  Id extends string,
  Groups extends HttpApiGroup.HttpApiGroup.Any,
  E,
  R,
  Group extends HttpApiGroup.HttpApiGroup.Any
>(
  api: HttpApi.HttpApi<Id, Groups, E, R>,
  group: Group,
  on: boolean
): HttpApi.HttpApi<Id, Groups | Group, E, R> =>
  on
    ? (api.add(group) as HttpApi.HttpApi<Id, Groups | Group, E, R>)
    : (api as HttpApi.HttpApi<Id, Groups | Group, E, R>)
