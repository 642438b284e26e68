/**
 * The due-time formula is written once in TypeScript (`Schedule`) and once in SQL (`AgentRepo`'s
 * `phaseSql` and `sliceWindowsSql`, which the slice claim runs): on PostgreSQL, over random hashes,
 * spreads, slicings and instants, with 2^32's boundaries and intervals up to a year, both give the
 * same phases and the same windows. Were they to drift apart, cards would be decided twice or never.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import fc from "fast-check"
import { phaseSql, sliceWindowsSql } from "../../src/agent/AgentRepo.js"
import { phaseOfHash, sliceWindow } from "../../src/agent/Schedule.js"
import { TestDatabase } from "../support/TestDatabase.js"

const HASHES = 2 ** 32
const YEAR_MS = 365 * 86_400_000

const hash = fc.oneof(
  fc.integer({ min: 0, max: HASHES - 1 }),
  fc.constantFrom(0, 1, HASHES - 2, HASHES - 1, HASHES, 2 ** 31 - 1, 2 ** 31, 2 ** 31 + 1)
)
const spread = fc.oneof(fc.integer({ min: 0, max: YEAR_MS }), fc.constantFrom(0, 1, 2 ** 31 - 1, 2 ** 31, 2 ** 32))
const interval = fc.integer({ min: 1, max: YEAR_MS })
const instant = fc.integer({ min: 100_000_000_000, max: 4_000_000_000_000 })
const slicing = fc.integer({ min: 0, max: 12 }).map((n) => 2 ** n)

const Phases = Schema.Array(Schema.Struct({ phase: Schema.NumberFromString }))
const Windows = Schema.Array(
  Schema.Struct({
    slice: Schema.Number,
    fromHash: Schema.NumberFromString,
    toHash: Schema.NumberFromString,
    opens: Schema.NumberFromString,
    closes: Schema.NumberFromString,
    base: Schema.NumberFromString
  })
)

layer(TestDatabase)("the due-time formula in TypeScript and in SQL", (it) => {
  it.effect("a hash's phase over a spread is the same on both sides", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const runtime = yield* Effect.runtime<never>()
      const phasesInSql = (cases: ReadonlyArray<readonly [number, number]>) =>
        // One statement per spread: the SQL takes the spread as a parameter, the hashes as a column.
        Effect.forEach(cases, ([h, s]) =>
          sql`SELECT ${phaseSql(sql, sql`${h}::bigint`, s)}::text AS phase`.pipe(
            Effect.flatMap(Schema.decodeUnknown(Phases)),
            Effect.map(([row]) => row!.phase)
          )
        ).pipe(Effect.orDie)
      yield* Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(fc.array(fc.tuple(hash, spread), { minLength: 1, maxLength: 20 }), async (cases) => {
            const inSql = await Effect.runPromise(phasesInSql(cases).pipe(Effect.provide(runtime)))
            expect(inSql).toEqual(cases.map(([h, s]) => phaseOfHash(BigInt(h), s)))
          }),
          { numRuns: 50 }
        )
      )
    })
  )

  it.effect("every slice's window is the same on both sides", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const runtime = yield* Effect.runtime<never>()
      yield* Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(
            slicing,
            interval,
            fc.double({ min: 0, max: 1, noNaN: true }),
            instant,
            async (slices, intervalMs, share, dueBy) => {
              const spreadMs = Math.floor(share * intervalMs)
              const rows = await Effect.runPromise(
                sql`SELECT slice, from_hash::text, to_hash::text, opens::text, closes::text, base::text
                    FROM (${sliceWindowsSql(sql, { slices, dueBy, interval: intervalMs, spread: spreadMs })}) w
                    ORDER BY slice`.pipe(
                  Effect.flatMap(Schema.decodeUnknown(Windows)),
                  Effect.orDie,
                  Effect.provide(runtime)
                )
              )
              expect(rows).toHaveLength(slices)
              for (const row of rows) {
                const window = sliceWindow(row.slice, slices, dueBy, intervalMs, spreadMs)
                expect({ from: row.fromHash, to: row.toHash, opens: row.base + row.opens }).toEqual({
                  from: window.from,
                  to: window.to,
                  opens: window.opens
                })
                expect({ base: row.base, closes: row.base + row.closes }).toEqual({
                  base: window.base,
                  closes: window.closes
                })
              }
            }
          ),
          { numRuns: 100 }
        )
      )
    })
  )
})
