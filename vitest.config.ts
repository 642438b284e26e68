import { configDefaults, defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // The reliability suite runs on its own: npm run test:reliability (vitest.reliability.config.ts).
    exclude: [...configDefaults.exclude, "test/reliability/**"],
    globalSetup: ["test/support/globalSetup.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Migrator.fromFileSystem import()s the .ts migrations; vitest must transform them.
    server: { deps: { inline: ["@effect/sql"] } }
  }
})
