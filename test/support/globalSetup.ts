/**
 * One PostgreSQL server for the whole run; every test file creates its own throwaway database
 * on it. `TEST_DATABASE_URL` names an existing server (CI uses the machine's); without it an
 * embedded PostgreSQL is started in a temporary directory and removed afterwards.
 *
 * The web app is built here once (dist/web/, reused while web/ is unchanged), so that the test
 * servers that start in parallel find it built rather than each building it.
 */
import { chmodSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import path from "node:path"
import { Effect, Exit, Redacted, Scope } from "effect"
import type {} from "vitest"
import type { TestProject } from "vitest/node"
import { ensureWebBuild } from "../../src/app/WebBuild.js"
import { startEmbeddedPostgres } from "../../src/embedded/EmbeddedPostgres.js"

export default async function setup(project: TestProject) {
  await ensureWebBuild()
  const given = process.env.TEST_DATABASE_URL
  if (given !== undefined && given !== "") {
    project.provide("adminDatabaseUrl", given)
    return
  }
  const dir = mkdtempSync(path.join(tmpdir(), "card-service-test-pg-"))
  chmodSync(dir, 0o755) // the server runs as the postgres user when we are root
  const scope = Effect.runSync(Scope.make())
  const teardown = async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    rmSync(dir, { recursive: true, force: true })
  }
  try {
    const url = await Effect.runPromise(
      startEmbeddedPostgres({ dir: path.join(dir, "data"), database: "postgres", unsafeFast: true }).pipe(
        Scope.extend(scope)
      )
    )
    project.provide("adminDatabaseUrl", Redacted.value(url))
  } catch (error) {
    await teardown()
    throw error
  }
  return teardown
}

declare module "vitest" {
  export interface ProvidedContext {
    adminDatabaseUrl: string
  }
}
