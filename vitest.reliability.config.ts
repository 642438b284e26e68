import { defineConfig } from "vitest/config"

/** `npm run test:reliability`: the reliability suite (fuzzing, dependency failures, crashes), one file at a time. */
export default defineConfig({
  test: {
    include: ["test/reliability/**/*.test.ts"],
    globalSetup: ["test/support/globalSetup.ts"],
    fileParallelism: false,
    testTimeout: 300_000,
    hookTimeout: 300_000,
    server: { deps: { inline: ["@effect/sql"] } }
  }
})
