/**
 * The sandbox identity provider's hosted page: pure HTML, no external assets, no script.
 * Every interpolated value is escaped. The form posts back to the page's own URL.
 */

export type SandboxPageState = "open" | "finished" | "expired"

export interface SandboxPageInput {
  readonly state: SandboxPageState
  /** Where the person goes back to (already checked against WEB_ORIGIN). */
  readonly returnUrl: string
}

const escapeHtml = (text: string): string =>
  text.replace(/[&<>"']/g, (c) =>
    c === "&" ? "&amp;" : c === "<" ? "&lt;" : c === ">" ? "&gt;" : c === '"' ? "&quot;" : "&#39;"
  )

const style = `
  body { font-family: system-ui, sans-serif; max-width: 32rem; margin: 3rem auto; padding: 0 1rem; color: #1a1a1a; }
  h1 { font-size: 1.4rem; }
  .note { background: #fff4d6; border: 1px solid #e6c35c; padding: .6rem .8rem; border-radius: .4rem; font-size: .9rem; }
  label { display: block; margin: 1rem 0 .3rem; font-weight: 600; }
  input { width: 100%; box-sizing: border-box; padding: .5rem; font-size: 1rem; }
  .actions { display: grid; grid-template-columns: 1fr 1fr; gap: .6rem; margin-top: 1.4rem; }
  button { padding: .6rem; font-size: 1rem; cursor: pointer; border-radius: .4rem; border: 1px solid #888; background: #f4f4f4; }
  button[value=approve] { background: #1f7a3a; color: white; border-color: #1f7a3a; }
`

const layout = (title: string, body: string): string =>
  `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${escapeHtml(title)}</title>
<style>${style}</style>
</head>
<body>
${body}
</body>
</html>
`

export const sandboxPage = (input: SandboxPageInput): string => {
  const back = `<p><a id="return" href="${escapeHtml(input.returnUrl)}">Return to the app</a></p>`
  switch (input.state) {
    case "finished":
      return layout(
        "Identity check finished",
        `<h1>Identity check finished</h1>\n<p>This check already has a result.</p>\n${back}`
      )
    case "expired":
      return layout(
        "Identity check expired",
        `<h1>Identity check expired</h1>\n<p>This link is no longer valid. Start the identity check again from the app.</p>\n${back}`
      )
    case "open":
      return layout(
        "Sandbox identity check",
        `<h1>Sandbox identity check</h1>
<p class="note">Test provider: no document is inspected. Type the details as they would appear on an
identity document and choose the result the provider should report.</p>
<form method="post" id="kyc-form">
  <label for="fullName">Full name, as on the document</label>
  <input id="fullName" name="fullName" autocomplete="off" maxlength="100" required>
  <label for="documentNumber">Document number</label>
  <input id="documentNumber" name="documentNumber" autocomplete="off" minlength="4" maxlength="32" required>
  <div class="actions">
    <button type="submit" name="outcome" value="approve">Approve</button>
    <button type="submit" name="outcome" value="decline" formnovalidate>Decline</button>
    <button type="submit" name="outcome" value="duplicate" formnovalidate>Duplicate</button>
    <button type="submit" name="outcome" value="abandon" formnovalidate>Abandon</button>
  </div>
</form>`
      )
  }
}
