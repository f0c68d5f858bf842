/**
 * A dependency refused us at start, or never answered. runService prints the message (which names
 * the cause and what to check, never a secret) and exits: 78 (EX_CONFIG) when retrying cannot help
 * (credentials, certificates, ACLs), 69 (EX_UNAVAILABLE) when the dependency did not answer in time.
 */
export type StartupFailure = 'authentication' | 'tls' | 'authorization' | 'configuration' | 'unreachable';

export class StartupError extends Error {
  override readonly name = 'StartupError';
  constructor(
    readonly dependency: 'kafka' | 'postgres' | 'schema-registry',
    readonly failure: StartupFailure,
    message: string,
  ) {
    super(message);
  }

  get exitCode(): number {
    return this.failure === 'unreachable' ? 69 : 78;
  }
}
