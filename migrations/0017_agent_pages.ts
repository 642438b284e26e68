import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { hashOf } from "../src/agent/Schedule.js"

/** Cards whose phase hash is written per statement while existing strategies are filled in. */
const BATCH = 10_000

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    -- A page of cards a replica claimed, until it has stored their decisions. The claim moves each
    -- card to its next due time at once (one write of its schedule row per interval, instead of a
    -- lease and then the move); this row keeps what a dead replica's page needs to be taken over
    -- when its lease ends: the cards, and the interval each was claimed for.
    CREATE TABLE agent_pages (
      id bigserial PRIMARY KEY,
      owner text NOT NULL,
      lease_until timestamptz NOT NULL,
      card_ids text[] NOT NULL,
      due_ats timestamptz[] NOT NULL
    );
    CREATE INDEX agent_pages_lease_idx ON agent_pages (lease_until);
    -- The per-card lease agent_pages replaces.
    ALTER TABLE agent_strategies DROP COLUMN lease_owner, DROP COLUMN lease_until;
    -- The card id's hash (src/agent/Schedule.ts), from which the claim computes the card's phase
    -- in every interval, and so its next due time, in the statement that claims it.
    ALTER TABLE agent_strategies ADD COLUMN due_hash bigint;
  `
  yield* storeCardHashes
  yield* sql`ALTER TABLE agent_strategies ALTER COLUMN due_hash SET NOT NULL`
})

/** Writes every strategy's card hash (`Schedule.hashOf`), as the code of this version computes it. */
export const storeCardHashes = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const ids = (yield* sql<{ card_id: string }>`SELECT card_id FROM agent_strategies`).map((row) => row.card_id)
  for (let i = 0; i < ids.length; i += BATCH) {
    const batch = ids.slice(i, i + BATCH)
    yield* sql`
      UPDATE agent_strategies s SET due_hash = h.due_hash
      FROM (SELECT unnest(${batch}::text[]) AS card_id, unnest(${batch.map(hashOf)}::bigint[]) AS due_hash) h
      WHERE s.card_id = h.card_id`
  }
})
