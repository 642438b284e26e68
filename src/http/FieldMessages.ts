/**
 * What a client reads when a request part (body, path, query string, headers) does not match its
 * schema: one clause per field, `<field>: <what it must be>` (`returnUrl: must be a URL string`),
 * joined by `; `, never the schema engine's own text (`Expected string, actual 5`, or a dump of a
 * whole struct's type when the body is not an object).
 *
 * The engine hands a schema's `message` annotation the whole tree of problems, each with the schema
 * that failed; `withFieldMessages` puts one on a request schema's root that writes the clauses from
 * that tree. A field's own `message` annotation (`must be a 0x-prefixed 20-byte hex address`), or
 * the text a filter failed with, wins over the clause its type gives.
 */
import { Array as Arr, SchemaAST as AST, Option, type ParseResult, type Schema } from "effect"

/** How many fields one message names at most. */
const MAX_CLAUSES = 5

/** "items.0.name"; a key is shown JSON-escaped (an unpaired surrogate as \ud800) and cut short. */
export const fieldName = (path: ReadonlyArray<PropertyKey>) =>
  path.length === 0
    ? "body"
    : path
        .map((part) => (typeof part === "string" ? JSON.stringify(part).slice(1, -1) : String(part)).slice(0, 64))
        .join(".")

/** What a value of this type is, as the end of "must be ...". */
const expected = (ast: AST.AST): string => {
  switch (ast._tag) {
    case "StringKeyword":
      return "a string"
    case "NumberKeyword":
      return "a number"
    case "BooleanKeyword":
      return "true or false"
    case "Literal":
      return JSON.stringify(ast.literal)
    case "TypeLiteral":
      return "an object"
    case "TupleType":
      return "an array"
    case "Union": {
      // An optional field's "or undefined" only says that it may be left out.
      const members = ast.types.filter((member) => !AST.isUndefinedKeyword(member))
      return members.every(AST.isLiteral)
        ? `one of ${members.map(expected).join(", ")}`
        : Arr.dedupe(members.map(expected)).join(" or ")
    }
    case "Refinement":
      // The filters describe themselves as phrases: "a finite number", "a string at most 100 character(s) long".
      return Option.getOrElse(AST.getDescriptionAnnotation(ast), () => expected(ast.from))
    case "Transformation":
      // A class is checked as the object it is made from; a parsed value (a number from text) as what it becomes.
      return AST.isDeclaration(ast.to) ? expected(ast.from) : expected(ast.to)
    default:
      return "a valid value"
  }
}

/** The message a schema's own `message` annotation gives this issue, when it gives one as text. */
const ownMessage = (issue: ParseResult.ParseIssue): string | undefined => {
  if (issue._tag === "Pointer" || issue._tag === "Unexpected") return undefined
  const annotation = AST.getMessageAnnotation(issue.ast)
  if (Option.isNone(annotation) || annotation.value === fieldMessages) return undefined
  const given = annotation.value(issue)
  if (typeof given === "string") return given
  return "message" in given && typeof given.message === "string" ? given.message : undefined
}

type Clause = readonly [path: ReadonlyArray<PropertyKey>, message: string]

const clauses = (issue: ParseResult.ParseIssue, path: ReadonlyArray<PropertyKey>): ReadonlyArray<Clause> => {
  const own = ownMessage(issue)
  if (own !== undefined) return [[path, own]]
  switch (issue._tag) {
    case "Pointer":
      return clauses(issue.issue, [...path, ...Arr.ensure(issue.path)])
    case "Missing":
      return [[path, "is required"]]
    case "Unexpected":
      return [[path, "is not allowed here"]]
    case "Forbidden":
      return [[path, "could not be checked"]]
    case "Type":
      // A filter that fails with text of its own (`|| "must fit in 256 bits"`) says what it wants.
      return [[path, issue.message ?? `must be ${expected(issue.ast)}`]]
    case "Refinement":
      return clauses(issue.issue, path)
    case "Transformation":
      // A transformation that could not make its value (text that is not JSON, not a number) fails with
      // the engine's words: it is told by what it makes, or by its own `message` annotation (above).
      return issue.kind === "Transformation" ? [[path, `must be ${expected(issue.ast)}`]] : clauses(issue.issue, path)
    case "Composite": {
      const inner = Arr.ensure(issue.issues)
      if (!AST.isUnion(issue.ast)) return inner.flatMap((each) => clauses(each, path))
      // A union: an optional field's "undefined" member says nothing; a member that matched the value's
      // own type (an object whose field is wrong) explains it best; otherwise the value matches no member.
      const tried = inner.filter((each) => !(each._tag === "Type" && AST.isUndefinedKeyword(each.ast)))
      const deeper = tried.filter((each) => each._tag !== "Type")
      if (tried.length === 1) return clauses(tried[0]!, path)
      return deeper.length > 0
        ? deeper.flatMap((each) => clauses(each, path))
        : [[path, `must be ${expected(issue.ast)}`]]
    }
  }
}

/** The issue as the clauses a client reads: "address: must be ...; signature: is required". */
export const describeIssue = (issue: ParseResult.ParseIssue): string =>
  Arr.dedupe(clauses(issue, []).map(([path, message]) => `${fieldName(path)}: ${message}`))
    .slice(0, MAX_CLAUSES)
    .join("; ")

const fieldMessages: AST.MessageAnnotation = (issue) => ({ message: describeIssue(issue), override: true })

/**
 * The request schema, its decode failures told field by field (`describeIssue`). Every schema an
 * endpoint decodes a request part with (`setPayload`, `setPath`, `setUrlParams`, `setHeaders`) is
 * given through it.
 */
export const withFieldMessages = <S extends Schema.Schema.Any>(schema: S): S =>
  // `annotations` answers a schema of the same kind (a Struct stays a Struct).
  schema.annotations({ message: fieldMessages }) as S
