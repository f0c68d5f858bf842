/**
 * The local operators of a demo or a small deployment: CONSOLE_USERS_FILE, one user a line,
 * `name role scrypt$N$r$p$salt$hash` (salt and hash base64url; `#` lines are comments). Passwords
 * are compared as scrypt hashes in constant time; an unknown name costs the same scrypt as a known
 * one, so timing does not tell which names exist. `console-hash-password` writes a line.
 */
import { randomBytes, scrypt as scryptCallback, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import { roles, type Role } from './session.js';

export interface LocalUser {
  readonly name: string;
  readonly role: Role;
  readonly hash: string;
}

const scrypt = (password: string, salt: Buffer, length: number, options: ScryptOptions) =>
  new Promise<Buffer>((resolve, reject) =>
    scryptCallback(password, salt, length, options, (error, key) => (error ? reject(error) : resolve(key))),
  );

/** N=2^15, r=8, p=1: about 32 MiB and tens of milliseconds per check. */
const DEFAULT_COST = { N: 32_768, r: 8, p: 1 } as const;
const NAME = /^[A-Za-z0-9._@+-]{1,128}$/;

export async function hashPassword(
  password: string,
  cost: { readonly N: number; readonly r: number; readonly p: number } = DEFAULT_COST,
): Promise<string> {
  const salt = randomBytes(16);
  const hash = await scrypt(password, salt, 32, { ...cost, maxmem: 128 * cost.N * cost.r * 2 });
  return `scrypt$${cost.N}$${cost.r}$${cost.p}$${salt.toString('base64url')}$${hash.toString('base64url')}`;
}

interface Parsed {
  readonly N: number;
  readonly r: number;
  readonly p: number;
  readonly salt: Buffer;
  readonly hash: Buffer;
}

function parseHash(text: string): Parsed | undefined {
  const parts = text.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return undefined;
  const [N, r, p] = parts.slice(1, 4).map(Number) as [number, number, number];
  const salt = Buffer.from(parts[4] as string, 'base64url');
  const hash = Buffer.from(parts[5] as string, 'base64url');
  // Bounds keep a hostile file from making a check allocate gigabytes.
  if (!Number.isInteger(N) || N < 1024 || N > 1_048_576 || (N & (N - 1)) !== 0) return undefined;
  if (!Number.isInteger(r) || r < 1 || r > 32 || !Number.isInteger(p) || p < 1 || p > 16) return undefined;
  if (salt.length < 16 || hash.length < 16) return undefined;
  return { N, r, p, salt, hash };
}

/** The file's users; a malformed line is an error naming its number (never its content). */
export function parseUsers(text: string): LocalUser[] {
  const users: LocalUser[] = [];
  text.split(/\r?\n/).forEach((raw, index) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const [name, role, hash, ...rest] = line.split(/\s+/);
    if (
      rest.length > 0 ||
      name === undefined ||
      !NAME.test(name) ||
      !(roles as readonly unknown[]).includes(role) ||
      hash === undefined ||
      parseHash(hash) === undefined
    ) {
      throw new Error(`line ${index + 1} is not \`name reader|operator scrypt$N$r$p$salt$hash\``);
    }
    if (users.some((u) => u.name === name)) throw new Error(`line ${index + 1} repeats a user`);
    users.push({ name, role: role as Role, hash });
  });
  return users;
}

// A hash no password matches, checked for unknown names so they cost what known ones do.
const DECOY = `scrypt$${DEFAULT_COST.N}$${DEFAULT_COST.r}$${DEFAULT_COST.p}$${randomBytes(16).toString('base64url')}$${randomBytes(32).toString('base64url')}`;

/** The user whose name and password these are, or undefined. */
export async function verifyLogin(
  users: readonly LocalUser[],
  name: string,
  password: string,
): Promise<LocalUser | undefined> {
  const user = users.find((u) => u.name === name);
  const parsed = parseHash(user?.hash ?? DECOY) as Parsed;
  const derived = await scrypt(password.slice(0, 1024), parsed.salt, parsed.hash.length, {
    N: parsed.N,
    r: parsed.r,
    p: parsed.p,
    maxmem: 128 * parsed.N * parsed.r * 2,
  });
  const same = timingSafeEqual(derived, parsed.hash);
  return user !== undefined && same ? user : undefined;
}
