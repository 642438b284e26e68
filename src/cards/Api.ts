import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Authentication } from "../auth/Api.js"
import { withFieldMessages } from "../http/FieldMessages.js"
import { pageQuery } from "../http/QueryParams.js"

export class ActivityItem extends Schema.Class<ActivityItem>("ActivityItem")({
  id: Schema.String.annotations({ description: "cursor for `before`" }),
  type: Schema.Literal("payment", "refill").annotations({
    description: "payment: the card paid a merchant; refill: the agent topped the card up"
  }),
  at: Schema.Number.annotations({ description: "ms since epoch" }),
  usd: Schema.Number.annotations({ description: "positive; `type` says the direction" }),
  description: Schema.String,
  tx: Schema.String
}) {}

const ActivityQuery = pageQuery({
  items: "items",
  id: /^[A-Za-z0-9_:-]{1,80}$/,
  idMessage: "must be an item id",
  beforeDescription: "the id of the last item of the previous page: answers the items after it"
})

export class StatementApi extends HttpApiGroup.make("statement")
  .add(
    HttpApiEndpoint.get("activity", "/me/activity")
      .setUrlParams(withFieldMessages(ActivityQuery))
      .addSuccess(Schema.Array(ActivityItem))
      .annotate(OpenApi.Summary, "Card statement")
      .annotate(
        OpenApi.Description,
        "The card statement, newest first: payments and agent refills. `?limit=` (1-200, default 50), " +
          "`?before=<id>` for the page after the item with that id."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Card statement")
  .annotate(
    OpenApi.Description,
    "What moved on the signed-in user's card: settled payments to the merchant and the agent's executed refills."
  ) {}
