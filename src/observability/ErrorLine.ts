/** An error on one line, as log lines, the fatal start-up line and an outage's reason give it. */

/** An error and its causes on one line: "PgClient: Failed to connect: connect ECONNREFUSED 127.0.0.1:1". */
export const describeError = (error: unknown): string => {
  if (error instanceof AggregateError && error.errors.length > 0) return error.errors.map(describeError).join("; ")
  if (error instanceof Error) {
    const cause = error.cause === undefined ? "" : describeError(error.cause)
    if (error.message === "") return cause || error.name
    return cause === "" || error.message.includes(cause) ? error.message : `${error.message}: ${cause}`
  }
  return String(error)
}
