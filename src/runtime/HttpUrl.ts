/** Reading text as an absolute http(s) URL: the one check every setting, return URL and payment resource shares. */

/** `text` as an absolute `http:` or `https:` URL, or undefined when it is anything else. */
export const parseHttpUrl = (text: string): URL | undefined => {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    return undefined
  }
  return url.protocol === "http:" || url.protocol === "https:" ? url : undefined
}
