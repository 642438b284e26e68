/**
 * Rebuilds `src/chain/contracts/artifacts.ts` from `contracts/*.sol`.
 * Run: `npx tsx scripts/build-contracts.ts`
 */
import { mkdir, writeFile } from "node:fs/promises"
import * as path from "node:path"
import { artifactsPath, compile, projectRoot, renderArtifacts } from "./compile-contracts.js"

const started = performance.now()
const compilation = await compile()
for (const warning of compilation.warnings) console.warn(warning)
await mkdir(path.dirname(artifactsPath), { recursive: true })
await writeFile(artifactsPath, renderArtifacts(compilation))
for (const c of compilation.contracts) {
  const initcode = (c.bytecode.length - 2) / 2
  const runtime = (c.deployedBytecode.length - 2) / 2
  console.log(
    `${c.name.padEnd(14)} initcode ${String(initcode).padStart(6)} B, runtime ${String(runtime).padStart(6)} B`
  )
}
console.log(
  `wrote ${path.relative(projectRoot, artifactsPath)} in ${Math.round(performance.now() - started)} ms (${compilation.warnings.length} warnings)`
)
