import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { storeCardHashes } from "./0017_agent_pages.js"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    -- The agent's schedule by slices of cards (src/agent/Schedule.ts): a replica claims a slice for
    -- one interval by this row (its window, under the replica's lease) and marks it done once the
    -- slice's decisions are stored, so that a steady interval writes two rows per slice and no card's
    -- row. A slice is a range of the cards' hashes out of \`slices\`, a power of two derived from the
    -- number of cards; rows of a slicing no longer in use are deleted by the loop.
    CREATE TABLE agent_slices (
      slices integer NOT NULL,
      slice integer NOT NULL,
      -- The window last claimed: when its first card was due.
      opens_at timestamptz NOT NULL,
      owner text NOT NULL,
      lease_until timestamptz NOT NULL,
      done boolean NOT NULL,
      PRIMARY KEY (slices, slice)
    );
    -- A slice's cards, read by a range of their hashes.
    CREATE INDEX agent_strategies_hash_idx ON agent_strategies (due_hash);
    -- due_at is now only a card's "due at once" mark (its strategy was just set or changed), cleared
    -- when that decision is claimed; the slices decide every card each interval. The cards' grids
    -- moved (their phase now grows with the hash): the old next due times are not carried over.
    ALTER TABLE agent_strategies ALTER COLUMN due_at DROP NOT NULL;
    UPDATE agent_strategies SET due_at = NULL WHERE due_at > now();
    DROP INDEX agent_strategies_due_idx;
    CREATE INDEX agent_strategies_due_idx ON agent_strategies (due_at) WHERE due_at IS NOT NULL;
  `
  // The hash gained a finalizer (src/agent/Schedule.ts): the phase is read from its high bits now.
  yield* storeCardHashes
})
