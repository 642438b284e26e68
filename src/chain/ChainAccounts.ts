/**
 * The service's own accounts on the chain (`ChainClient.account`: the agent wallets' trades and
 * transfers) and the embedded devnet's faucet. Each sends through its one ordered queue; a trade
 * approves the exchange first only when its simulation says the allowance is what is missing.
 */
import { Effect, Option, Redacted } from "effect"
import type { PrivateKeyAccount, PublicClient } from "viem"
import { encodeFunctionData, erc20Abi, type Hash, type Hex, maxUint256, parseAbiItem, parseEther } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import type { Address } from "./Address.js"
import {
  CallReverted,
  type ChainAccount,
  ChainError,
  type Faucet,
  type RecordSigned,
  type Usd1Call,
  type Usd1Token
} from "./ChainClient.js"
import { DemoExchangeArtifact } from "./contracts/artifacts.js"
import type { RelayerFees } from "./Deployment.js"
import { DEVNET_DEPLOYER_KEY } from "./Devnet.js"
import { usd1CallData } from "./Eip2612.js"
import type { FeeEstimate } from "./FeeEstimate.js"
import { chainCall, type Read } from "./NodeErrors.js"
import { signingAccount } from "./Secp256k1.js"
import type { SendQueue } from "./SendQueues.js"
import { type Call, GAS_MARGIN_ONE, type Transactions, withMargin } from "./Transactions.js"

/** Gas ether the devnet faucet gives with every grant. */
const FAUCET_GAS = parseEther("1")

const noRecord: RecordSigned<never, never> = () => Effect.void

/** `mint(to, amount)` of USD1 and of the stock tokens alike. */
const mintAbi = [parseAbiItem("function mint(address to, uint256 amount)")]

export interface ChainAccountsOptions {
  readonly usd1: Usd1Token
  readonly exchange: Option.Option<Address>
  readonly publicClient: PublicClient
  readonly transactions: Transactions
  readonly fees: FeeEstimate
  /** A stuck transaction's bound, its fee bumps and MAX_FEE_PER_GAS: the relayer's, for every account. */
  readonly relayerFees: RelayerFees
  readonly read: Read
  readonly queueOf: (sender: Address) => SendQueue
  /** Waits for the transaction's receipt; not mined in time or reverted is a `ChainError`. */
  readonly minedSuccessfully: (what: string, hash: Hash) => Effect.Effect<void, ChainError>
}

export const chainAccounts = ({
  usd1,
  exchange,
  publicClient,
  transactions,
  fees,
  relayerFees,
  read,
  queueOf,
  minedSuccessfully
}: ChainAccountsOptions) => {
  const { simulate, signAndSend, send, signCall, pendingNonce, replacement } = transactions

  const exchangeAddress = Option.match(exchange, {
    onNone: () => Effect.fail(new ChainError({ message: "no exchange is configured (EXCHANGE_ADDRESS)" })),
    onSome: (exchange) => Effect.succeed(exchange)
  })

  /**
   * Simulates a call that makes the exchange pull `amount` of `spent` from the signer. When the
   * only obstacle is the exchange's allowance, approves it for good (max, recorded like the call,
   * waited for) and simulates again; any other refusal sends nothing.
   */
  const simulateSpending = <E, R>(
    signer: PrivateKeyAccount,
    call: Call,
    spent: Address,
    amount: bigint,
    record: RecordSigned<E, R>
  ) =>
    simulate(signer.address, call).pipe(
      Effect.catchIf(
        (refused): refused is CallReverted => refused._tag === "CallReverted" && /allowance/i.test(refused.reason),
        (refused) =>
          Effect.gen(function* () {
            const exchange = call.to
            const allowance = yield* chainCall("allowance", () =>
              publicClient.readContract({
                address: spent,
                abi: erc20Abi,
                functionName: "allowance",
                args: [signer.address, exchange]
              })
            )
            if (allowance >= amount) return yield* refused
            const approve: Call = {
              to: spent,
              data: encodeFunctionData({ abi: erc20Abi, functionName: "approve", args: [exchange, maxUint256] })
            }
            const gas = yield* simulate(signer.address, approve)
            const approval = yield* signAndSend(signer, approve, withMargin(gas, GAS_MARGIN_ONE), record, "approval")
            yield* minedSuccessfully("approve the exchange", approval.hash)
            return yield* simulate(signer.address, call)
          })
      )
    )

  const trade = <E, R>(
    signer: PrivateKeyAccount,
    side: "sell" | "buy",
    token: Address,
    amountIn: bigint,
    minOut: bigint,
    record: RecordSigned<E, R>
  ) =>
    Effect.gen(function* () {
      const exchange = yield* exchangeAddress
      const call: Call = {
        to: exchange,
        data: encodeFunctionData({
          abi: DemoExchangeArtifact.abi,
          functionName: side,
          args: [token, amountIn, minOut, signer.address]
        })
      }
      const spent = side === "sell" ? token : usd1.address
      return yield* queueOf(signer.address).serially(
        Effect.flatMap(simulateSpending(signer, call, spent, amountIn, record), (gas) =>
          signAndSend(signer, call, withMargin(gas, GAS_MARGIN_ONE), record)
        )
      )
    }).pipe(Effect.withSpan(`ChainAccount.${side}`, { attributes: { "chain.token": token } }))

  /** A USD1 call's calldata; a permit whose signature is not 65 bytes is refused before anything is sent. */
  const usd1Call = (call: Usd1Call) =>
    Option.match(Option.fromNullable(usd1CallData(call)), {
      onNone: () => Effect.fail(new CallReverted({ reason: "a permit takes a 65-byte signature" })),
      onSome: Effect.succeed
    })

  const account = (key: Redacted.Redacted<Hex>): ChainAccount => {
    const signer = signingAccount(Redacted.value(key))
    return {
      address: signer.address,
      sell: (token, amount, minUsd1Out, record) => trade(signer, "sell", token, amount, minUsd1Out, record),
      buy: (token, usd1In, minTokensOut, record) => trade(signer, "buy", token, usd1In, minTokensOut, record),
      nonce: (at) =>
        at === "pending"
          ? pendingNonce(signer.address)
          : read<Hex>("mined nonce", "eth_getTransactionCount", [signer.address, "latest"]).pipe(
              Effect.map((count) => Number(BigInt(count)))
            ),
      estimate: (call) =>
        Effect.flatMap(usd1Call(call), (data) => simulate(signer.address, { to: usd1.address, data })).pipe(
          Effect.map((gas) => withMargin(gas, GAS_MARGIN_ONE)),
          Effect.withSpan("ChainAccount.estimate", { attributes: { "chain.call": call._tag } })
        ),
      sign: (call, gas, nonce) =>
        Effect.flatMap(usd1Call(call), (data) =>
          Effect.flatMap(fees.current, (fee) => signCall(signer, { to: usd1.address, data }, gas, nonce, fee))
        ).pipe(Effect.catchTag("CallReverted", (refused) => new ChainError({ message: refused.reason }))),
      bump: (stuck) => replacement(signer, stuck, relayerFees).pipe(Effect.withSpan("ChainAccount.bump")),
      transferUsd1: (to, amount, record) =>
        send(
          signer,
          {
            to: usd1.address,
            data: encodeFunctionData({ abi: erc20Abi, functionName: "transfer", args: [to, amount] })
          },
          record
        ).pipe(Effect.withSpan("ChainAccount.transferUsd1"))
    }
  }

  /** The devnet's deployer mints every token: gas ether, then the mints, all simulated before any is sent. */
  const devnetFaucet = (): Faucet => {
    const minter = privateKeyToAccount(DEVNET_DEPLOYER_KEY)
    return {
      fund: (to, grant) =>
        queueOf(minter.address)
          .serially(
            Effect.gen(function* () {
              const mints = [{ token: usd1.address, amount: grant.usd1 }, ...grant.tokens].filter(
                ({ amount }) => amount > 0n
              )
              const calls: ReadonlyArray<{ readonly what: string; readonly call: Call }> = [
                { what: "gas", call: { to, data: "0x", value: FAUCET_GAS } },
                ...mints.map(({ token, amount }) => ({
                  what: `mint ${token}`,
                  call: {
                    to: token,
                    data: encodeFunctionData({ abi: mintAbi, functionName: "mint", args: [to, amount] })
                  }
                }))
              ]
              const gas = yield* Effect.forEach(
                calls,
                ({ what, call }) =>
                  simulate(minter.address, call).pipe(
                    Effect.catchTag(
                      "CallReverted",
                      (refused) => new ChainError({ message: `faucet: ${what}: ${refused.reason}` })
                    )
                  ),
                { concurrency: "unbounded" }
              )
              const sent = yield* Effect.forEach(calls, ({ call }, i) =>
                signAndSend(minter, call, withMargin(gas[i]!, GAS_MARGIN_ONE), noRecord)
              )
              yield* Effect.forEach(sent, ({ hash }) => minedSuccessfully("faucet", hash), {
                concurrency: "unbounded"
              })
            })
          )
          .pipe(Effect.withSpan("Faucet.fund", { attributes: { "chain.to": to } }))
    }
  }

  return { account, devnetFaucet }
}
