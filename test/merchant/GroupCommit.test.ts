/**
 * The relayer's group commit (issue 26): the sends waiting on the relayer key's queue take
 * consecutive nonces and are journaled in one statement. With 1-second blocks and a burst of
 * payments at once: each settles exactly once (transfers on chain = paid orders) and the journal is
 * written in batches; a batch whose journal statement fails sends none of its payments and leaves
 * no nonce gap; a payment decided meanwhile inside a batch (its entry not written, the batch's later
 * ones written) leaves a nonce that is filled, so nothing after it stays queued on chain. On the real
 * devnet (interval mining) and database; the journal's failures are the database's own (triggers).
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { createPublicClient, http } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { send } from "../support/http.js"
import { payAllAtOnce, signedOrder, usd1TransfersTo } from "../support/settlements.js"
import { devnetRpc, TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"
import { enoughFor } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())
const RELAYER = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[9]!).address
const BURST = 40

layer(testServer({ MERCHANT_PAY_TO: merchant.address, RECONCILE_INTERVAL: "500 millis" }), {
  excludeTestServices: true
})("the relayer's group commit", (it) => {
  /**
   * A burst of payments from fresh payers (one each) sent at once on 1-second blocks, then every
   * order followed until it is paid or open again: what the chain, the answers and the database say.
   */
  const burst = (size: number, poisoned: (index: number) => boolean = () => false) =>
    Effect.gen(function* () {
      const devnet = yield* TestDevnet
      const sql = yield* SqlClient.SqlClient
      const client = createPublicClient({ transport: http(devnet.rpcUrl) })
      yield* devnetRpc(devnet, "evm_setAutomine", [true])
      const payers = Array.from({ length: size }, () => privateKeyToAccount(generatePrivateKey()))
      for (const payer of payers) yield* mintUsd1(devnet, payer.address, enoughFor("1")).pipe(Effect.orDie)
      const payments = yield* Effect.forEach(payers, (payer) => signedOrder(payer, "1", "group"))
      const poison = payments.filter((_, index) => poisoned(index)).map((payment) => payment.id)
      if (poison.length > 0) yield* sql`INSERT INTO journal_poison ${sql.insert(poison.map((id) => ({ orderId: id })))}`
      const nonceBefore = yield* Effect.promise(() => client.getTransactionCount({ address: RELAYER }))
      const fromBlock = yield* Effect.promise(() => client.getBlockNumber())

      yield* devnetRpc(devnet, "evm_setAutomine", [false])
      yield* devnetRpc(devnet, "evm_setIntervalMining", [1])
      const answers = yield* payAllAtOnce(payments)
      const orders = yield* eventually(
        "every order to be paid or open again",
        Effect.forEach(payments, (payment) =>
          send("GET", `/merchant/orders/${payment.id}`).pipe(Effect.map((response) => response.body))
        ),
        (all) => all.every((order) => order.status === "paid" || order.status === "open"),
        { atMost: "90 seconds" }
      )
      const paid = orders.filter((order) => order.status === "paid")
      // No nonce gap: every relayer transaction sent is mined, none left queued behind a missing nonce.
      const [mined, pending] = yield* eventually(
        "the relayer's transactions to be mined",
        Effect.promise(() =>
          Promise.all([
            client.getTransactionCount({ address: RELAYER, blockTag: "latest" }),
            client.getTransactionCount({ address: RELAYER, blockTag: "pending" })
          ])
        ),
        ([latest, inPool]) => latest === inPool && latest >= nonceBefore + paid.length
      )
      const transfers = yield* usd1TransfersTo(devnet, merchant.address, fromBlock)
      yield* devnetRpc(devnet, "evm_setIntervalMining", [0])
      yield* devnetRpc(devnet, "evm_setAutomine", [true])
      return {
        answers: answers.map((answer) => answer.status),
        orders,
        paid,
        poison,
        transfers,
        relayerTransactions: mined - nonceBefore,
        queued: pending - mined
      }
    })

  const setUp = Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql`
      CREATE TABLE IF NOT EXISTS journal_poison (order_id text PRIMARY KEY);
      CREATE TABLE IF NOT EXISTS journal_statements (entries int NOT NULL);
      CREATE OR REPLACE FUNCTION count_journal_entries() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO journal_statements SELECT count(*) FROM written HAVING count(*) > 0;
        RETURN NULL;
      END $$;
      CREATE OR REPLACE TRIGGER journal_entries AFTER INSERT ON relayed_transactions
        REFERENCING NEW TABLE AS written FOR EACH STATEMENT EXECUTE FUNCTION count_journal_entries();
      TRUNCATE journal_poison, journal_statements;`
  )
  const journalStatements = Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ readonly entries: number }>`SELECT entries FROM journal_statements`
  ).pipe(Effect.map((rows) => rows.map((row) => row.entries)))

  /** Transfers on chain = paid orders: one each, in the order's own transaction. */
  const exactlyOnce = (outcome: Effect.Effect.Success<ReturnType<typeof burst>>) => {
    expect(outcome.transfers).toHaveLength(outcome.paid.length)
    expect(new Set(outcome.transfers.map((log) => log.transactionHash))).toEqual(
      new Set(outcome.paid.map((order) => order.tx))
    )
  }

  /**
   * A burst of BURST whose `poisoned` payments meet the trigger `create` makes (`drop` removes it
   * after the burst, whatever happens), checked exactly-once.
   */
  /**
   * A burst of BURST payments (those `poisoned` picks marked in `journal_poison`) while the trigger
   * `name` runs `check` (plpgsql) `timing` each row of `table`, letting through the rows it does not
   * end itself; the trigger is dropped after.
   */
  const burstUnderTrigger = (
    trigger: { readonly name: string; readonly timing: string; readonly table: string; readonly check: string },
    poisoned: (index: number) => boolean
  ) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const { name, timing, table, check } = trigger
      yield* setUp
      yield* sql.unsafe(`
        CREATE OR REPLACE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          ${check}
          RETURN NEW;
        END $$;
        CREATE OR REPLACE TRIGGER ${name} ${timing} ON ${table} FOR EACH ROW EXECUTE FUNCTION ${name}();`)
      const outcome = yield* burst(BURST, poisoned).pipe(
        Effect.ensuring(Effect.orDie(sql.unsafe(`DROP TRIGGER ${name} ON ${table}`)))
      )
      exactlyOnce(outcome)
      return outcome
    })

  it.effect(
    "a burst is journaled in batches and settles exactly once",
    () =>
      Effect.gen(function* () {
        yield* setUp
        const outcome = yield* burst(BURST)
        for (const status of outcome.answers) expect([200, 202]).toContain(status)
        expect(outcome.paid).toHaveLength(BURST)
        exactlyOnce(outcome)
        // one relayer nonce per payment, none skipped
        expect(outcome.relayerTransactions).toBe(BURST)
        const statements = yield* journalStatements
        console.log(`${BURST} payments at once journaled in ${statements.length} statements: ${statements.join(", ")}`)
        expect(statements.reduce((sum, entries) => sum + entries, 0)).toBe(BURST)
        // batches, not a statement per payment
        expect(statements.length).toBeLessThan(BURST)
        expect(Math.max(...statements)).toBeGreaterThan(1)
      }),
    180_000
  )

  it.effect(
    "a batch whose journal statement fails sends none of it and leaves no nonce gap",
    () =>
      Effect.gen(function* () {
        // The statement that journals a poisoned order's transaction fails whole.
        const outcome = yield* burstUnderTrigger(
          {
            name: "refuse_poisoned",
            timing: "BEFORE INSERT",
            table: "relayed_transactions",
            check: `IF EXISTS (SELECT 1 FROM settlements s JOIN journal_poison p ON p.order_id = s.order_id
                               WHERE s.id = NEW.settlement_id) THEN
                      RAISE EXCEPTION 'journal refused for the test';
                    END IF;`
          },
          (index) => index % 10 === 3
        )
        // nothing of a poisoned order was journaled or sent: it is open again
        for (const order of outcome.orders) {
          if (outcome.poison.includes(order.id)) expect(order.status).toBe("open")
        }
        // the payments that shared a failed batch are open too, the rest paid; one nonce per paid one
        expect(outcome.paid.length).toBeGreaterThan(0)
        expect(outcome.relayerTransactions).toBe(outcome.paid.length)
        expect(outcome.queued).toBe(0)

        // and the relayer goes on from there
        const after = yield* burst(10)
        expect(after.paid).toHaveLength(10)
        exactlyOnce(after)
        expect(after.relayerTransactions).toBe(10)
      }),
    240_000
  )

  it.effect(
    "a payment decided inside a batch: its nonce is filled, the batch's later payments are mined",
    () =>
      Effect.gen(function* () {
        // A poisoned settlement is not moved to broadcast: its entry is "decided", the batch's others written.
        const outcome = yield* burstUnderTrigger(
          {
            name: "decide_poisoned",
            timing: "BEFORE UPDATE",
            table: "settlements",
            check: `IF OLD.status = 'pending' AND NEW.status = 'broadcast'
                       AND EXISTS (SELECT 1 FROM journal_poison p WHERE p.order_id = NEW.order_id) THEN
                      RETURN NULL;
                    END IF;`
          },
          (index) => index % 2 === 0
        )
        for (const order of outcome.orders) {
          expect(order.status).toBe(outcome.poison.includes(order.id) ? "open" : "paid")
        }
        expect(outcome.paid).toHaveLength(BURST / 2)
        // every nonce freed below a written one got an empty transaction: nothing left queued
        expect(outcome.queued).toBe(0)
        const filled = outcome.relayerTransactions - outcome.paid.length
        expect(filled).toBeGreaterThan(0)
        expect(Math.max(...(yield* journalStatements))).toBeGreaterThan(1)
      }),
    240_000
  )
})
