/** Where the checkout is, and how a script's messages show a path in it. */
import { isAbsolute, join, relative } from 'node:path';

export const root = join(import.meta.dirname, '..', '..');

/** Relative to the checkout when inside it (`reports/bench`), else as given. */
export function shownPath(path: string): string {
  const inside = relative(root, path);
  return inside.startsWith('..') || isAbsolute(inside) ? path : inside;
}
