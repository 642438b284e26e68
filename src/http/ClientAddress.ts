/**
 * Who a request comes from, as every per-client limit counts it (the rate limits, the event
 * streams): the connection's address, or the first `X-Forwarded-For` entry when `TRUST_PROXY=true`
 * (only behind a proxy that sets it).
 *
 * An IPv6 client is its /64: a subscriber is given at least a /64 (RFC 6177), so one client holds
 * some 2^64 addresses and would otherwise count as that many. An IPv4 address is itself, also when
 * written IPv4-mapped (`::ffff:192.0.2.1`, as a dual-stack server reports IPv4 peers).
 */
import { isIPv4, isIPv6 } from "node:net"
import type { HttpServerRequest } from "@effect/platform"
import { Config, Option } from "effect"

export const trustProxySetting = Config.boolean("TRUST_PROXY").pipe(Config.withDefault(false))

/** The eight 16-bit groups of an IPv6 address (zone dropped, a trailing dotted quad as two groups). */
const ipv6Groups = (address: string): ReadonlyArray<number> => {
  let text = address.split("%")[0]!.toLowerCase()
  const quad = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text)
  if (quad !== null) {
    const [a, b, c, d] = quad.slice(1).map(Number) as [number, number, number, number]
    text = `${text.slice(0, quad.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`
  }
  const parts = (run: string) => (run === "" ? [] : run.split(":").map((group) => Number.parseInt(group, 16)))
  const [head = "", tail] = text.split("::")
  if (tail === undefined) return parts(head)
  const [front, back] = [parts(head), parts(tail)]
  return [...front, ...Array<number>(8 - front.length - back.length).fill(0), ...back]
}

/** The client an address counts as: an IPv4 address, an IPv6 /64 (`2001:db8:0:1::/64`), or the text as given. */
export const clientGroup = (address: string): string => {
  const bare = address.replace(/^\[(.*)\]$/, "$1")
  if (isIPv4(bare)) return bare
  if (!isIPv6(bare)) return address
  const groups = ipv6Groups(bare)
  if (groups.slice(0, 5).every((group) => group === 0) && groups[5] === 0xffff) {
    return [groups[6]! >> 8, groups[6]! & 0xff, groups[7]! >> 8, groups[7]! & 0xff].join(".")
  }
  return `${groups
    .slice(0, 4)
    .map((group) => group.toString(16))
    .join(":")}::/64`
}

/** The client `request` comes from, grouped as above. */
export const clientOf = (request: HttpServerRequest.HttpServerRequest, trustProxy: boolean): string => {
  const forwarded = request.headers["x-forwarded-for"]?.split(",")[0]?.trim()
  const address =
    trustProxy && forwarded !== undefined && forwarded !== ""
      ? forwarded
      : Option.getOrElse(request.remoteAddress, () => "unknown")
  return clientGroup(address)
}
