/**
 * Peer of the sign-in benchmark: how many EIP-191 signatures one process recovers per second with
 * viem's `recoverMessageAddress`, one after another, over SIWE-sized messages signed beforehand.
 * Prints one JSON line: `{ recoveries, ms, cpuMs }`.
 *
 * Run by the benchmark as plain JavaScript (see harness.ts): package imports only.
 * Environment: SECONDS (measuring time), WARM_SECONDS.
 */
import { recoverMessageAddress } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"

const signed = await Promise.all(
  Array.from({ length: 64 }, async (_, i) => {
    const account = privateKeyToAccount(generatePrivateKey())
    const message = [
      "localhost:3000 wants you to sign in with your Ethereum account:",
      account.address,
      "",
      "Sign in to the card service.",
      "",
      "URI: http://localhost:3000",
      "Version: 1",
      "Chain ID: 31337",
      `Nonce: ${i.toString(16).padStart(32, "0")}`,
      `Issued At: ${new Date().toISOString()}`,
      `Expiration Time: ${new Date(Date.now() + 600_000).toISOString()}`
    ].join("\n")
    return { address: account.address, message, signature: await account.signMessage({ message }) }
  })
)

const recoverFor = async (ms: number) => {
  const started = performance.now()
  let recoveries = 0
  while (performance.now() - started < ms) {
    const sample = signed[recoveries % signed.length]!
    const address = await recoverMessageAddress({ message: sample.message, signature: sample.signature })
    if (address !== sample.address) throw new Error("recovered the wrong address")
    recoveries++
  }
  return { recoveries, ms: performance.now() - started }
}

await recoverFor(Number(process.env.WARM_SECONDS ?? "1") * 1000)
const cpuBefore = process.cpuUsage()
const { recoveries, ms } = await recoverFor(Number(process.env.SECONDS ?? "3") * 1000)
const cpu = process.cpuUsage(cpuBefore)
console.log(JSON.stringify({ recoveries, ms, cpuMs: (cpu.user + cpu.system) / 1000 }))
