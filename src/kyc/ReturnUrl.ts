/**
 * Where the identity provider sends the person back: pure, no I/O.
 *
 * A `returnUrl` is kept only when it is an absolute http(s) URL without credentials whose origin
 * is exactly one of the trusted web origins (`WEB_ORIGIN`). Anything else (absent, relative,
 * protocol-relative, `javascript:`, another host, a host that merely starts with a trusted one,
 * `user@host` tricks, another port or scheme) is replaced by `${APP_URL}/`. The kept URL is
 * answered in its parsed, normalised form, never as the raw text.
 */

import { parseHttpUrl } from "../runtime/HttpUrl.js"

const MAX_RETURN_URL_LENGTH = 2048

export interface ReturnUrlPolicy {
  /** Exact origins, e.g. `https://app.example.com` (AppConfig.webOrigins). */
  readonly webOrigins: ReadonlyArray<string>
  /** The app's public URL without a trailing slash (AppConfig.appUrl). */
  readonly appUrl: string
}

export const defaultReturnUrl = (policy: ReturnUrlPolicy): string => `${policy.appUrl.replace(/\/+$/, "")}/`

/** The trusted form of `given`, or undefined when it must not be used. */
export const trustedReturnUrl = (given: string, webOrigins: ReadonlyArray<string>): string | undefined => {
  if (given.length === 0 || given.length > MAX_RETURN_URL_LENGTH) return undefined
  // Control characters and whitespace are silently dropped by URL parsers; refuse them instead.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the point is to find control characters
  if (/[\u0000-\u0020\u007f-\u009f\\]/.test(given)) return undefined
  // Only absolute URLs: a scheme, then "//". Protocol-relative and relative URLs are refused.
  if (!/^https?:\/\/[^/]/i.test(given)) return undefined
  const url = parseHttpUrl(given)
  if (url === undefined) return undefined
  if (url.username !== "" || url.password !== "") return undefined
  return webOrigins.includes(url.origin) ? url.href : undefined
}

/** `given` when trusted, else the default `${APP_URL}/`. */
export const resolveReturnUrl = (given: string | null | undefined, policy: ReturnUrlPolicy): string =>
  (given == null ? undefined : trustedReturnUrl(given, policy.webOrigins)) ?? defaultReturnUrl(policy)
