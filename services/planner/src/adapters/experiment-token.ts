/**
 * The planner's token for the experiment service: EXPERIMENT_TOKEN_FILE, a mounted Secret read again
 * every SECRET_FILE_REFRESH_MS so a rotation needs no restart, or, for development, EXPERIMENT_TOKEN;
 * never both. A bad one stops the start (ConfigError, exit 78) naming the variable and the path,
 * never the token. It must be one bearer token as the experiment service parses one: anything else
 * would be refused there anyway, and a line break (two tokens in the file, as the API token files
 * allow) would make fetch quote the whole Authorization header, token and all, in its error.
 */
import { reloadingSecret, type Logger, type Reloading } from '@outreach/shared';
import type { Config } from '../config.js';

/** The token characters the experiment service accepts (service/auth.ts: printable ASCII, no space, no comma). */
const BEARER_TOKEN = /^[\x21-\x2b\x2d-\x7e]+$/;

export function experimentToken(
  config: Pick<Config, 'EXPERIMENT_TOKEN' | 'EXPERIMENT_TOKEN_FILE' | 'SECRET_FILE_REFRESH_MS'>,
  logger?: Logger,
  readFile?: (path: string) => string,
): Reloading<string | undefined> {
  return reloadingSecret(
    { EXPERIMENT_TOKEN: config.EXPERIMENT_TOKEN, EXPERIMENT_TOKEN_FILE: config.EXPERIMENT_TOKEN_FILE },
    'EXPERIMENT_TOKEN',
    {
      intervalMs: config.SECRET_FILE_REFRESH_MS,
      check: (token) =>
        BEARER_TOKEN.test(token)
          ? undefined
          : 'must hold exactly one bearer token: one line of printable ASCII, without spaces or commas',
      ...(logger ? { logger } : {}),
      ...(readFile ? { readFile } : {}),
    },
  );
}

/**
 * The planner's token for another peer (SENDER_TOKEN / LIVENESS_TOKEN, each with its _FILE form),
 * read and checked like EXPERIMENT_TOKEN.
 */
export function peerToken(
  name: 'SENDER_TOKEN' | 'LIVENESS_TOKEN',
  config: Pick<
    Config,
    'SENDER_TOKEN' | 'SENDER_TOKEN_FILE' | 'LIVENESS_TOKEN' | 'LIVENESS_TOKEN_FILE' | 'SECRET_FILE_REFRESH_MS'
  >,
  logger?: Logger,
  readFile?: (path: string) => string,
): Reloading<string | undefined> {
  return reloadingSecret({ [name]: config[name], [`${name}_FILE`]: config[`${name}_FILE`] }, name, {
    intervalMs: config.SECRET_FILE_REFRESH_MS,
    check: (token) =>
      BEARER_TOKEN.test(token)
        ? undefined
        : 'must hold exactly one bearer token: one line of printable ASCII, without spaces or commas',
    ...(logger ? { logger } : {}),
    ...(readFile ? { readFile } : {}),
  });
}
