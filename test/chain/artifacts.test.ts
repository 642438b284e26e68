import { readFile } from "node:fs/promises"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { artifactsPath, compileContracts } from "../../scripts/compile-contracts.js"

describe("contract artifacts", () => {
  it.live(
    "src/chain/contracts/artifacts.ts is exactly what scripts/build-contracts.ts generates from contracts/*.sol",
    () =>
      Effect.gen(function* () {
        const [generated, committed] = yield* Effect.promise(() =>
          Promise.all([compileContracts(), readFile(artifactsPath, "utf8")])
        )
        // Compare lengths first so a mismatch does not dump 60 kB of diff; then the full text.
        expect(
          generated.length,
          "artifacts are stale: run `npx tsx scripts/build-contracts.ts` and commit the result"
        ).toBe(committed.length)
        expect(
          generated === committed,
          "artifacts differ from the sources: run `npx tsx scripts/build-contracts.ts`"
        ).toBe(true)
      }),
    300_000
  )
})
