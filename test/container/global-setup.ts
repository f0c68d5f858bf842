/**
 * Global setup of the container project: builds the image from the Dockerfile as is before any file
 * runs (`npm run image:build`'s function: Docker where an engine answers, else buildah, the base made
 * once per machine where no registry serves it). Layer caching makes a build with nothing changed
 * take seconds.
 */
import { buildImage } from '../../scripts/lib/container.js';

export default function setup(): void {
  const built = buildImage();
  process.stderr.write(`[image] ${built.image} built with ${built.engine} in ${built.seconds.toFixed(1)} s\n`);
}
