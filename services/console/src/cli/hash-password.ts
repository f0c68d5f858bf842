#!/usr/bin/env node
/**
 * `console-hash-password <name> <reader|operator>`: reads a password from standard input (one line)
 * and prints the CONSOLE_USERS_FILE line for it. The password never appears in the arguments.
 */
import { createInterface } from 'node:readline';
import { hashPassword } from '../security/users.js';
import { roles } from '../security/session.js';

const [name, role] = process.argv.slice(2);
if (!name || !/^[A-Za-z0-9._@+-]{1,128}$/.test(name) || !(roles as readonly string[]).includes(role ?? '')) {
  process.stderr.write('usage: console-hash-password <name> <reader|operator>  (the password on standard input)\n');
  process.exit(64);
}
const lines = createInterface({ input: process.stdin });
const password = await new Promise<string>((resolve) => {
  lines.once('line', resolve);
  lines.once('close', () => resolve(''));
});
lines.close();
if (password.length < 8) {
  process.stderr.write('the password must have at least 8 characters\n');
  process.exit(65);
}
process.stdout.write(`${name} ${role} ${await hashPassword(password)}\n`);
