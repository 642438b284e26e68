/**
 * The Luhn (mod 10) check used by card numbers: pure, no I/O.
 * From the rightmost digit, every second digit is doubled (minus 9 when above 9); the number is
 * valid when the sum is a multiple of 10.
 */

const DIGITS = /^\d+$/

/** The Luhn sum of `digits`, treating the last digit as the check position when `withCheck`. */
const luhnSum = (digits: string, withCheck: boolean): number => {
  let sum = 0
  for (let i = 0; i < digits.length; i++) {
    let digit = digits.charCodeAt(digits.length - 1 - i) - 48
    // Doubling starts at the rightmost digit when there is no check digit yet.
    if (i % 2 === (withCheck ? 1 : 0)) {
      digit *= 2
      if (digit > 9) digit -= 9
    }
    sum += digit
  }
  return sum
}

/** The check digit that makes `partial + digit` Luhn-valid. */
export const checkDigit = (partial: string): number => {
  if (!DIGITS.test(partial)) throw new Error("checkDigit expects decimal digits")
  return (10 - (luhnSum(partial, false) % 10)) % 10
}

/** `partial` followed by its check digit. */
export const withCheckDigit = (partial: string): string => `${partial}${checkDigit(partial)}`

/** Whether `number` (digits only, at least two) passes the Luhn check. */
export const isLuhnValid = (number: string): boolean =>
  number.length >= 2 && DIGITS.test(number) && luhnSum(number, true) % 10 === 0
