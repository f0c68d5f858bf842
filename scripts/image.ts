/**
 * `npm run image:build`: builds the Dockerfile as is into outreach:dev (OUTREACH_IMAGE), with Docker
 * where an engine answers, else with buildah, making the Dockerfile's base once per machine where no
 * registry serves it (scripts/lib/container.ts; deploy/README.md, "Build and verify the image without
 * Docker"). Exit 0 when built, 1 with the reason otherwise.
 */
import { buildImage, ContainerError } from './lib/container.js';

try {
  const built = buildImage();
  process.stdout.write(
    `[image] built ${built.image} with ${built.engine} in ${built.seconds.toFixed(1)} s` +
      `${built.base === 'made' ? ' (the base was made first)' : ''}\n`,
  );
} catch (error) {
  process.stderr.write(
    `[image] ${error instanceof ContainerError ? error.message : String((error as Error)?.stack ?? error)}\n`,
  );
  process.exit(1);
}
