/**
 * Screens are URLs under /app: `navigate` pushes a history entry, back and forward restore the
 * screen (popstate), and a reload asks the service for the same path, which answers the app's
 * page for any path under /app. `Link` is a plain link that the app follows without a reload.
 */
import { signal } from "@preact/signals"
import type { ComponentChildren } from "preact"

export const BASE = "/app"

const here = () => `${location.pathname}${location.search}`

/** The current path and query, e.g. `/app/statement`. */
export const route = signal(here())

export const navigate = (to: string, options: { readonly replace?: boolean } = {}) => {
  if (to === here()) return
  if (options.replace === true) history.replaceState(null, "", to)
  else history.pushState(null, "", to)
  route.value = here()
}

window.addEventListener("popstate", () => {
  route.value = here()
})

/** The path without its query. */
export const pathOf = (to: string) => to.split("?")[0] ?? to

/** A query parameter of the current route. */
export const queryParam = (name: string) => new URLSearchParams(route.value.split("?")[1] ?? "").get(name)

export const Link = (props: {
  readonly href: string
  readonly children: ComponentChildren
  readonly class?: string
  readonly current?: boolean
}) => (
  <a
    href={props.href}
    class={props.class}
    aria-current={props.current === true ? "page" : undefined}
    onClick={(event) => {
      if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return
      event.preventDefault()
      navigate(props.href)
    }}
  >
    {props.children}
  </a>
)
