/** The client a per-client limit counts: an IPv6 address is its /64, however it is written. */
import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import { clientGroup } from "../../src/http/ClientAddress.js"

const groups = FastCheck.array(FastCheck.oneof(FastCheck.constant(0), FastCheck.integer({ min: 0, max: 0xffff })), {
  minLength: 8,
  maxLength: 8
})

const hex = (group: number) => group.toString(16)
const full = (address: ReadonlyArray<number>) => address.map((group) => hex(group).padStart(4, "0")).join(":")
/** The form URL writes (RFC 5952: lower case, the longest run of zero groups as `::`). */
const canonical = (address: ReadonlyArray<number>) => new URL(`http://[${full(address)}]/`).hostname.slice(1, -1)
const prefix = (address: ReadonlyArray<number>) => `${address.slice(0, 4).map(hex).join(":")}::/64`
const mapped = (address: ReadonlyArray<number>) => address.slice(0, 5).every((g) => g === 0) && address[5] === 0xffff

describe("clientGroup", () => {
  it.prop(
    "an IPv6 address is its /64, written in full, compressed, in upper case or with a zone",
    [groups],
    ([address]) => {
      FastCheck.pre(!mapped(address))
      for (const written of [
        full(address),
        canonical(address),
        canonical(address).toUpperCase(),
        `${canonical(address)}%eth0`,
        `[${canonical(address)}]`
      ]) {
        expect(clientGroup(written), written).toBe(prefix(address))
      }
    }
  )

  it.prop("two addresses are one client exactly when their first 64 bits agree", [groups, groups], ([a, b]) => {
    FastCheck.pre(!mapped(a) && !mapped(b))
    const sameNetwork = [...a.slice(0, 4), ...b.slice(4)]
    expect(clientGroup(canonical(sameNetwork))).toBe(clientGroup(canonical(a)))
    expect(clientGroup(canonical(a)) === clientGroup(canonical(b))).toBe(a.slice(0, 4).join() === b.slice(0, 4).join())
  })

  it("an IPv4 address is itself, also IPv4-mapped; what is no address stays as given", () => {
    expect(clientGroup("192.0.2.1")).toBe("192.0.2.1")
    expect(clientGroup("::ffff:192.0.2.1")).toBe("192.0.2.1")
    expect(clientGroup("::FFFF:c000:0201")).toBe("192.0.2.1")
    expect(clientGroup("::1")).toBe("0:0:0:0::/64")
    expect(clientGroup("64:ff9b::192.0.2.1")).toBe("64:ff9b:0:0::/64")
    expect(clientGroup("2001:db8:1:2::a")).toBe(clientGroup("2001:db8:1:2:ffff:ffff:ffff:ffff"))
    expect(clientGroup("2001:db8:1:2::a")).not.toBe(clientGroup("2001:db8:1:3::a"))
    for (const other of ["unknown", "", "example.com", "1.2.3", "2001:db8::1::2"])
      expect(clientGroup(other)).toBe(other)
  })
})
