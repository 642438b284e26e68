import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- Each user's event counter. A writer takes the next ids of a user by updating this row, in the
    -- transaction that makes the change the events tell of: the row stays locked until that
    -- transaction ends, so a user's ids are dense (a rolled-back id is given again) and become
    -- visible in id order. A reader that has seen id N has seen every id below it.
    CREATE TABLE event_sequences (
      address text PRIMARY KEY REFERENCES users (address),
      last_id bigint NOT NULL CHECK (last_id > 0)
    );

    -- The live events of GET /me/events: the source of truth a stream reads (NOTIFY only wakes the
    -- replicas). Kept EVENTS_RETENTION (7 days); a user's oldest events go first.
    CREATE TABLE events (
      address text NOT NULL,
      id bigint NOT NULL,
      type text NOT NULL CHECK (type IN ('kyc', 'payment', 'refill', 'decision', 'strategy')),
      -- The JSON as the API encodes it, kept as written (json, not jsonb: streamed as it is).
      data json NOT NULL,
      created_at timestamptz NOT NULL,
      PRIMARY KEY (address, id)
    );
    CREATE INDEX events_created_at_idx ON events (created_at);

    -- The open streams of every replica, for the per-user limit (the oldest beyond it is closed,
    -- whichever replica holds it), and each replica's heartbeat (one row, refreshed every
    -- EVENTS_HEARTBEAT): the streams of a replica whose heartbeat went stale are dropped by the
    -- retention job.
    CREATE TABLE event_replicas (
      id uuid PRIMARY KEY,
      seen_at timestamptz NOT NULL
    );
    CREATE TABLE event_connections (
      id uuid PRIMARY KEY,
      address text NOT NULL,
      replica uuid NOT NULL,
      opened_at timestamptz NOT NULL
    );
    CREATE INDEX event_connections_address_idx ON event_connections (address, opened_at);
    CREATE INDEX event_connections_replica_idx ON event_connections (replica);
  `
)
