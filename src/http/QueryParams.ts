/** Query-string parameters shared by several endpoints. */
import { Schema } from "effect"

/** How many items a page of a list holds (the statement, the decision log) when `?limit=` is absent. */
export const DEFAULT_PAGE_SIZE = 50

/**
 * An optional whole number from `min` to `max`, read from its decimal text; absent, the handler
 * uses `fallback` (documented as the default). It stays optional in the decoded type, so a typed
 * client may leave it out. The query string carries text, so OpenAPI would show the encoded
 * `string`; the document shows the integer, its bounds and default instead, so a generated client
 * takes `limit: 10`. Any failure (not a number, a fraction, out of range) reads as one message
 * naming the bounds.
 */
export const optionalInteger = (min: number, max: number, fallback: number) =>
  Schema.optionalWith(
    Schema.NumberFromString.pipe(Schema.int(), Schema.between(min, max)).annotations({
      message: () => ({ message: `must be an integer from ${min} to ${max}`, override: true }),
      jsonSchema: { type: "integer", minimum: min, maximum: max, default: fallback }
    }),
    { exact: true }
  )

/**
 * A page of a list, newest first: `limit` items before the cursor `before` (the id of the previous
 * page's last item). Each list names its items, says what an id looks like and which way the page goes.
 */
export const pageQuery = (list: {
  readonly items: string
  readonly id: RegExp
  readonly idMessage: string
  readonly beforeDescription: string
}) =>
  Schema.Struct({
    limit: optionalInteger(1, 200, DEFAULT_PAGE_SIZE).annotations({
      description: `how many ${list.items}, newest first`
    }),
    before: Schema.optionalWith(
      Schema.String.pipe(Schema.pattern(list.id, { message: () => list.idMessage })).annotations({
        description: list.beforeDescription
      }),
      { exact: true }
    )
  })
