/** The embedded devnet's faucet: test USD1 for the signed-in address (shown only on the devnet). */

import { useSignal } from "@preact/signals"
import { api, cardBalance } from "./account.js"
import { run } from "./api.js"
import { config } from "./config.js"
import { usd } from "./format.js"
import { Button, ErrorNotice, useAction } from "./ui.js"

export const FaucetButton = () => {
  const { busy, error, perform } = useAction()
  const granted = useSignal<string | undefined>(undefined)
  if (!config.devnet) return null
  return (
    <div class="faucet">
      <Button
        busy={busy.value}
        onClick={() =>
          perform(async () => {
            const grant = await run(api().devnet.faucet())
            cardBalance.value = grant.usd1
            granted.value = `Added ${usd(grant.grantedUsd1)} of test USD1: the card holds ${usd(grant.usd1)}.`
          })
        }
      >
        Add test USD1 (devnet)
      </Button>
      {granted.value === undefined ? null : (
        <p role="status" class="small-print">
          {granted.value}
        </p>
      )}
      <ErrorNotice error={error.value} />
    </div>
  )
}
