/**
 * The web app's build is reused only while it is current: on a copy of the project, a second start
 * reuses it; a change to a module of src/ that the bundle imports (the merchant's amounts, through the
 * API's schemas) builds it again, as does a new file under web/. And the bundle builds for the
 * browser from scratch: a module it imports that needs Node fails the build (and so this test).
 */
import { appendFileSync, cpSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { ensureWebBuild, projectRoot } from "../../src/app/WebBuild.js"

const copyOfProject = Effect.acquireRelease(
  Effect.sync(() => {
    const root = projectRoot()
    const copy = mkdtempSync(path.join(tmpdir(), "card-service-web-build-"))
    for (const entry of ["web", "src", "package.json", "package-lock.json", "tsconfig.json"]) {
      cpSync(path.join(root, entry), path.join(copy, entry), { recursive: true })
    }
    symlinkSync(path.join(root, "node_modules"), path.join(copy, "node_modules"))
    return copy
  }),
  (copy) => Effect.sync(() => rmSync(copy, { recursive: true, force: true }))
)

const builtIn = (root: string) => Effect.promise(() => ensureWebBuild(root)).pipe(Effect.map(({ built }) => built))

describe("the web app's build", () => {
  it.scoped("is built again when a file it read changes, and only then", () =>
    Effect.gen(function* () {
      const root = yield* copyOfProject
      expect(yield* builtIn(root)).toBe(true)
      expect(yield* builtIn(root)).toBe(false)

      appendFileSync(path.join(root, "src", "merchant", "Money.ts"), "\n// changed\n")
      expect(yield* builtIn(root)).toBe(true)
      expect(yield* builtIn(root)).toBe(false)

      writeFileSync(path.join(root, "web", "unused.ts"), "export const unused = 1\n")
      expect(yield* builtIn(root)).toBe(true)

      // A module of src/ the bundle never reads does not make it stale.
      appendFileSync(path.join(root, "src", "authorizations", "Authorizations.ts"), "\n// changed\n")
      expect(yield* builtIn(root)).toBe(false)
    })
  )
})
