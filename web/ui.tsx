/** Small pieces every screen uses: error notices, busy buttons, copy buttons, field messages. */
import { useSignal } from "@preact/signals"
import type { ButtonHTMLAttributes, ComponentChildren } from "preact"
import { type AppError, asAppError } from "./api.js"

/** An error as a person reads it: what happened (the API's words) and what to do. */
export const ErrorNotice = (props: { readonly error: AppError | undefined; readonly id?: string }) =>
  props.error === undefined ? null : (
    <div class="notice error" role="alert" id={props.id}>
      <p>{props.error.message}</p>
      {props.error.advice === undefined ? null : <p class="advice">{props.error.advice}</p>}
    </div>
  )

/** Runs `action`, keeping its error (as an AppError) and whether it is running. */
export const useAction = () => {
  const busy = useSignal(false)
  const error = useSignal<AppError | undefined>(undefined)
  const perform = async <A,>(action: () => Promise<A>): Promise<A | undefined> => {
    busy.value = true
    error.value = undefined
    try {
      return await action()
    } catch (failure) {
      error.value = asAppError(failure)
      return undefined
    } finally {
      busy.value = false
    }
  }
  return { busy, error, perform }
}

export const Button = (
  props: ButtonHTMLAttributes & { readonly busy?: boolean; readonly children: ComponentChildren }
) => {
  const { busy, children, disabled, ...rest } = props
  return (
    <button type="button" {...rest} disabled={busy === true || disabled === true} aria-busy={busy === true}>
      {children}
    </button>
  )
}

/** A value with a button that copies it to the clipboard and says so. */
export const Copyable = (props: { readonly value: string; readonly label: string; readonly shown?: string }) => {
  const copied = useSignal(false)
  return (
    <span class="copyable">
      <code class="hash" title={props.value}>
        {props.shown ?? props.value}
      </code>
      <button
        type="button"
        class="small"
        aria-label={`Copy ${props.label}`}
        onClick={async () => {
          await navigator.clipboard.writeText(props.value)
          copied.value = true
        }}
      >
        {copied.value ? "Copied" : "Copy"}
      </button>
    </span>
  )
}

/** A screen's heading, focused when the screen opens so that keyboard and screen-reader users land on it. */
export const ScreenTitle = (props: { readonly children: ComponentChildren }) => (
  <h1 tabIndex={-1} id="screen-title">
    {props.children}
  </h1>
)

/** The message the API gave about one field, under that field (linked by aria-describedby). */
export const FieldMessage = (props: { readonly id: string; readonly message: string | undefined }) =>
  props.message === undefined ? null : (
    <p class="field-message" id={props.id}>
      {props.message}
    </p>
  )
