/**
 * The import graph of src/, read from the source text, and the rules the floors of the house keep
 * (docs/architecture.md): the platform imports no domain and not the app; a domain reaches another
 * only through its face (its API schemas, its service, its port); no files import each other in a
 * circle, nor do folders (a file of src/ root counts as a folder of its own). Pure, so that each rule is shown failing on a tiny graph as well as passing on the code.
 */
import { readdirSync, readFileSync } from "node:fs"
import path from "node:path"

/** Each file (a path from the project's root, with `/`) and the files of the graph it imports. */
export type ImportGraph = ReadonlyMap<string, ReadonlyArray<string>>

/** The folders of src/ that are the platform: what any domain may use, and what uses no domain. */
export const PLATFORM = ["embedded", "http", "lifecycle", "observability", "runtime", "storage"] as const

/**
 * What a domain offers the others: its API schemas, its service, its port and the small modules
 * its API is made of. Anything else in a domain's folder is its own business.
 */
export const FACES: Readonly<Record<string, ReadonlyArray<string>>> = {
  // Standing.ts: where a user stands, which the event stream's first frame shows too.
  account: ["Api.ts", "Account.ts", "Standing.ts"],
  // AgentEvents.ts: the port through which the agent tells what it did, implemented by events/.
  agent: ["Api.ts", "Agent.ts", "AgentEvents.ts"],
  app: ["WebApp.ts"],
  // AuthorizationEvents.ts: the port through which a decision is told, implemented by events/;
  // AuthorizationSettings.ts: which card network runs (the web app offers its terminal then).
  authorizations: ["Api.ts", "AuthorizationEvents.ts", "AuthorizationSettings.ts"],
  // Http.ts: the authentication middleware every group that needs a session is built with.
  auth: ["Api.ts", "Auth.ts", "Http.ts"],
  // Allowance.ts: the spending allowance's rules, which a decision counts; CardProgram.ts: its settlement account;
  // ProgramSender.ts: the one way that account sends (its nonces), which the clearings' settlement uses too.
  // CardDebts.ts: what a card has committed and owes, read by the agent, and its repayment, which the agent
  // reports (the settlement account's address with it); DebtEvents.ts: the port through which a repayment is
  // told, implemented by events/.
  cards: [
    "Api.ts",
    "Cards.ts",
    "Card.ts",
    "Statement.ts",
    "CardIssuer.ts",
    "Allowance.ts",
    "CardProgram.ts",
    "CardDebts.ts",
    "DebtEvents.ts",
    "ProgramSender.ts"
  ],
  // Secp256k1.ts: who signed a hash or a message, which sign-in checks before any chain call.
  // Eip2612.ts: the permit typed data a holder signs for the spending allowance.
  chain: ["ChainClient.ts", "Address.ts", "Tokens.ts", "Secp256k1.ts", "Eip2612.ts"],
  devnet: ["Api.ts"],
  events: ["Api.ts", "Events.ts", "EventSettings.ts"],
  // Readiness.ts: where a part that is on adds its check to /ready's.
  health: ["Api.ts", "Readiness.ts"],
  // Document.ts: the identity document the provider port reads; KycConfig.ts: its settings;
  // KycEvents.ts: the port through which a state change is told, implemented by events/.
  kyc: ["Api.ts", "Kyc.ts", "KycState.ts", "KycProvider.ts", "KycEvents.ts", "Document.ts", "KycConfig.ts"],
  // Calendar.ts and TimeZone.ts: the trading calendar, pure, that the agent plans with.
  market: ["Api.ts", "Market.ts", "PriceFeed.ts", "Calendar.ts", "TimeZone.ts"],
  merchant: ["Api.ts", "Merchant.ts", "PaymentProcessor.ts"],
  retention: ["Retention.ts"]
}

const posix = (file: string) => file.split(path.sep).join("/")

/** Every `.ts` file under `dir`, as a path from the project's root. */
export const sourceFiles = (dir: string): ReadonlyArray<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? sourceFiles(path.join(dir, entry.name))
      : entry.name.endsWith(".ts")
        ? [posix(path.join(dir, entry.name))]
        : []
  )

/** The relative imports of a module's text (static, `export … from` and `import()`), as written. */
export const relativeImports = (text: string): ReadonlyArray<string> =>
  [...text.matchAll(/(?:\bfrom|\bimport)\s*\(?\s*"(\.{1,2}\/[^"]+)"/g)].map((match) => match[1]!)

/** The graph of the given files: each relative import resolved to the `.ts` file it names. */
export const importGraph = (files: ReadonlyArray<{ readonly file: string; readonly text: string }>): ImportGraph =>
  new Map(
    files.map(({ file, text }) => [
      file,
      relativeImports(text).map((specifier) =>
        path.posix.normalize(path.posix.join(path.posix.dirname(file), specifier)).replace(/\.js$/, ".ts")
      )
    ])
  )

/** The graph of src/ as it stands. */
export const sourceGraph = (dir = "src"): ImportGraph =>
  importGraph(sourceFiles(dir).map((file) => ({ file, text: readFileSync(file, "utf8") })))

export type Place =
  | { readonly kind: "app"; readonly file: string }
  | { readonly kind: "platform"; readonly folder: string }
  | { readonly kind: "domain"; readonly folder: string; readonly name: string }

/** Where a file of src/ stands: the app (src/ itself), a platform folder, or a domain. */
export const placeOf = (file: string): Place => {
  const [, folder, ...rest] = file.split("/")
  if (rest.length === 0) return { kind: "app", file: folder! }
  return (PLATFORM as ReadonlyArray<string>).includes(folder!)
    ? { kind: "platform", folder: folder! }
    : { kind: "domain", folder: folder!, name: rest.join("/") }
}

/** Why `from` may not import `to`, or undefined where it may. */
export const breach = (from: string, to: string, faces = FACES): string | undefined => {
  const source = placeOf(from)
  const target = placeOf(to)
  if (source.kind === "app") return undefined
  if (target.kind === "app") {
    // A domain's handlers are built against the whole API (Api.ts), the one thing the app offers.
    return source.kind === "domain" && source.name === "Http.ts" && target.file === "Api.ts"
      ? undefined
      : "only the app imports the app's files (a domain's Http.ts may import Api.ts)"
  }
  if (source.kind === "platform") return target.kind === "platform" ? undefined : "the platform imports no domain"
  if (target.kind === "platform" || target.folder === source.folder) return undefined
  return faces[target.folder]?.includes(target.name) === true
    ? undefined
    : `${target.folder}/${target.name} is inside ${target.folder}/, not its face`
}

/** Every import of the graph that breaks a rule, as "from -> to: why". */
export const breaches = (graph: ImportGraph, faces = FACES): ReadonlyArray<string> =>
  [...graph].flatMap(([from, targets]) =>
    targets.flatMap((to) => {
      const why = breach(from, to, faces)
      return why === undefined ? [] : [`${from} -> ${to}: ${why}`]
    })
  )

/** The circles of the graph: each a set of two or more files that reach each other (Tarjan). */
export const circles = (graph: ImportGraph): ReadonlyArray<ReadonlyArray<string>> => {
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: Array<string> = []
  const onStack = new Set<string>()
  const found: Array<ReadonlyArray<string>> = []
  const visit = (file: string) => {
    index.set(file, index.size)
    low.set(file, index.get(file)!)
    stack.push(file)
    onStack.add(file)
    for (const next of graph.get(file) ?? []) {
      if (!graph.has(next)) continue
      if (!index.has(next)) {
        visit(next)
        low.set(file, Math.min(low.get(file)!, low.get(next)!))
      } else if (onStack.has(next)) {
        low.set(file, Math.min(low.get(file)!, index.get(next)!))
      }
    }
    if (low.get(file) === index.get(file)) {
      const members: Array<string> = []
      let member: string
      do {
        member = stack.pop()!
        onStack.delete(member)
        members.push(member)
      } while (member !== file)
      if (members.length > 1) found.push(members.sort())
    }
  }
  for (const file of graph.keys()) if (!index.has(file)) visit(file)
  return found
}

/** The room a file of src/ stands in: its folder, or itself for a file of src/ root (the app's). */
export const folderOf = (file: string): string => {
  const [root, folder, ...rest] = file.split("/")
  return rest.length === 0 ? file : `${root}/${folder}`
}

/**
 * The idiom that two folders import each other by: the app's `Api.ts` composes every domain's group,
 * and a domain's `Http.ts` builds its handlers on the whole of it (`HttpApiBuilder.group(Api, …)`).
 */
const buildsOnTheApi = (from: string, to: string) => {
  const source = placeOf(from)
  return source.kind === "domain" && source.name === "Http.ts" && to === "src/Api.ts"
}

/** Which folders import which, but for the `Api.ts` idiom (each folder with the folders it imports). */
export const folderGraph = (graph: ImportGraph): ImportGraph => {
  const folders = new Map<string, Set<string>>()
  for (const [from, targets] of graph) {
    const imports = folders.get(folderOf(from)) ?? new Set<string>()
    folders.set(folderOf(from), imports)
    for (const to of targets) {
      if (folderOf(to) !== folderOf(from) && !buildsOnTheApi(from, to)) imports.add(folderOf(to))
    }
  }
  return new Map([...folders].map(([folder, imports]) => [folder, [...imports].sort()]))
}

/** The folders that import each other in a circle (a pair, or longer), each circle sorted. */
export const folderCircles = (graph: ImportGraph): ReadonlyArray<ReadonlyArray<string>> => circles(folderGraph(graph))
