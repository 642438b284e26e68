import { execFileSync } from "node:child_process"
import {
  chmodSync,
  chownSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readlinkSync,
  symlinkSync,
  writeFileSync
} from "node:fs"
import path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { reachableFolder } from "../../src/embedded/PostgresBinaries.js"
import { temporaryDirectory } from "../support/process.js"

const postgresUser = () => ({
  uid: Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" })),
  gid: Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }))
})

/** A small stand-in for the package's `native` folder, inside a folder only root can enter. */
const privateInstall = Effect.gen(function* () {
  const root = yield* temporaryDirectory("card-service-bin-test-")
  chmodSync(root, 0o700)
  const installed = path.join(root, "native")
  for (const folder of ["bin", "lib", "share"]) mkdirSync(path.join(installed, folder), { recursive: true })
  writeFileSync(path.join(installed, "bin", "initdb"), "#!/bin/sh\necho initdb ran as $(id -un)\n", { mode: 0o700 })
  writeFileSync(path.join(installed, "lib", "libpq.so.5.18"), "library", { mode: 0o600 })
  symlinkSync("libpq.so.5.18", path.join(installed, "lib", "libpq.so.5"))
  writeFileSync(path.join(installed, "share", "postgres.bki"), "catalog", { mode: 0o600 })
  const cache = path.join(yield* temporaryDirectory("card-service-bin-cache-"), "bin")
  return { root, installed, cache }
})

const modeOf = (file: string) => lstatSync(file).mode & 0o777

describe.skipIf(process.getuid?.() !== 0)("PostgreSQL binaries as root", () => {
  it.scopedLive("binaries the postgres user cannot reach run from a verified copy in a root-owned cache", () =>
    Effect.gen(function* () {
      const { installed, cache } = yield* privateInstall
      const copy = yield* reachableFolder(installed, cache)
      expect(path.dirname(copy)).toBe(cache)
      expect(modeOf(cache)).toBe(0o755)
      expect([
        modeOf(copy),
        modeOf(path.join(copy, "bin", "initdb")),
        modeOf(path.join(copy, "lib", "libpq.so.5.18"))
      ]).toEqual([0o755, 0o755, 0o644])
      expect(readlinkSync(path.join(copy, "lib", "libpq.so.5"))).toBe("libpq.so.5.18")
      expect(readFileSync(path.join(copy, "share", "postgres.bki"), "utf8")).toBe("catalog")
      // the unprivileged user runs it
      const output = execFileSync(path.join(copy, "bin", "initdb"), { ...postgresUser(), encoding: "utf8" })
      expect(output).toBe("initdb ran as postgres\n")

      // reused while identical; a copy that changed is replaced
      expect(yield* reachableFolder(installed, cache)).toBe(copy)
      writeFileSync(path.join(copy, "share", "postgres.bki"), "tampered")
      expect(yield* reachableFolder(installed, cache)).toBe(copy)
      expect(readFileSync(path.join(copy, "share", "postgres.bki"), "utf8")).toBe("catalog")
      // a different installation gets a copy of its own
      writeFileSync(path.join(installed, "share", "postgres.bki"), "catalog 2")
      const second = yield* reachableFolder(installed, cache)
      expect(second).not.toBe(copy)
      expect(readFileSync(path.join(second, "share", "postgres.bki"), "utf8")).toBe("catalog 2")
    })
  )

  it.scopedLive("binaries everyone can read are used where they are", () =>
    Effect.gen(function* () {
      const { root, installed, cache } = yield* privateInstall
      chmodSync(root, 0o755)
      chmodSync(path.join(installed, "bin", "initdb"), 0o755)
      chmodSync(path.join(installed, "lib", "libpq.so.5.18"), 0o644)
      chmodSync(path.join(installed, "share", "postgres.bki"), 0o644)
      expect(yield* reachableFolder(installed, cache)).toBe(installed)
    })
  )

  it.scopedLive("a cache folder someone else owns is refused", () =>
    Effect.gen(function* () {
      const { installed, cache } = yield* privateInstall
      mkdirSync(cache)
      chownSync(cache, postgresUser().uid, postgresUser().gid)
      const error = yield* Effect.flip(reachableFolder(installed, cache))
      expect(error).toMatchObject({ _tag: "EmbeddedServerError", server: "PostgreSQL", path: cache })
      expect(error.reason).toBe("it must be a folder owned by root that others cannot write to; remove it")
    })
  )
})
