# syntax=docker/dockerfile:1.7
# One image for the four services, the operations console and their operational commands (see
# deploy/docker/commands.json):
#   docker build -t outreach .
#   docker run --read-only outreach sender          # or planner, experiment, liveness, console, migrate, topics:ensure
#   docker run outreach                             # the commands
# Without Docker: `npm run image:build` builds this file as is with buildah (deploy/README.md), and
# `npm run test:container` runs the stack from the image (test/container/). The base is Node.js 24 LTS
# at the exact version of .node-version (ADR 008; a test keeps the two equal). Pin it by digest in your
# registry mirror.
ARG NODE_IMAGE=node:24.22.3-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
COPY packages/contracts/package.json packages/contracts/
COPY packages/shared/package.json packages/shared/
COPY packages/testkit/package.json packages/testkit/
COPY packages/ops/package.json packages/ops/
COPY services/planner/package.json services/planner/
COPY services/sender/package.json services/sender/
COPY services/experiment/package.json services/experiment/
COPY services/liveness/package.json services/liveness/
COPY services/console/package.json services/console/
# A build behind a TLS-inspecting proxy needs its CA: pass it as a secret, which is mounted for this
# step only and never lands in a layer (the runtime stage starts from the base again):
#   docker build --secret id=build_ca,src=/path/to/ca-bundle.pem .
# Without the secret the step runs as before.
RUN --mount=type=secret,id=build_ca,required=false \
    if [ -s /run/secrets/build_ca ]; then export NODE_EXTRA_CA_CERTS=/run/secrets/build_ca; fi; \
    npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.base.json tsconfig.json ./
COPY packages/contracts packages/contracts
COPY packages/shared packages/shared
COPY packages/ops packages/ops
COPY services services
# The runtime stage takes node_modules as pruned here: production dependencies only. The test kit's
# workspace link (its package is never copied) and the scopes the prune emptied go too.
RUN npm run build && npm prune --omit=dev --ignore-scripts --no-audit --no-fund \
    && rm node_modules/@outreach/testkit && find node_modules -mindepth 1 -maxdepth 1 -type d -empty -delete

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production HTTP_HOST=0.0.0.0 HTTP_PORT=8080
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules node_modules
COPY --from=build /app/packages/contracts/package.json packages/contracts/
COPY --from=build /app/packages/contracts/dist packages/contracts/dist
COPY --from=build /app/packages/shared/package.json packages/shared/
COPY --from=build /app/packages/shared/dist packages/shared/dist
COPY --from=build /app/packages/shared/migrations packages/shared/migrations
COPY --from=build /app/packages/ops/package.json packages/ops/
COPY --from=build /app/packages/ops/dist packages/ops/dist
COPY --from=build /app/services/planner/package.json services/planner/
COPY --from=build /app/services/planner/dist services/planner/dist
COPY --from=build /app/services/planner/migrations services/planner/migrations
COPY --from=build /app/services/sender/package.json services/sender/
COPY --from=build /app/services/sender/dist services/sender/dist
COPY --from=build /app/services/sender/migrations services/sender/migrations
COPY --from=build /app/services/experiment/package.json services/experiment/
COPY --from=build /app/services/experiment/dist services/experiment/dist
COPY --from=build /app/services/experiment/migrations services/experiment/migrations
COPY --from=build /app/services/liveness/package.json services/liveness/
COPY --from=build /app/services/liveness/dist services/liveness/dist
COPY --from=build /app/services/liveness/migrations services/liveness/migrations
COPY --from=build /app/services/console/package.json services/console/
COPY --from=build /app/services/console/dist services/console/dist
COPY --from=build /app/services/console/migrations services/console/migrations
COPY --from=build /app/services/console/assets services/console/assets
COPY deploy/docker/entrypoint.mjs deploy/docker/healthcheck.mjs deploy/docker/commands.json deploy/docker/
# The commit `outreach_build_info` names: docker build --build-arg OUTREACH_COMMIT=$(git rev-parse HEAD) .
# Last, so that a new commit rebuilds no layer above.
ARG OUTREACH_COMMIT=unknown
ENV OUTREACH_COMMIT=${OUTREACH_COMMIT}
# Files stay root-owned and read-only to the process; nothing is written at run time.
USER 10001:10001
EXPOSE 8080
# Ready when the service answers /health/ready on HTTP_PORT (Docker and Podman; Kubernetes ignores this
# and uses the Deployments' probes). The one-shot commands (migrate, topics:ensure) do not serve HTTP:
# run them with --no-healthcheck, as docker-compose.yml does.
HEALTHCHECK --interval=5s --timeout=5s --start-period=10s --retries=24 \
    CMD ["node", "/app/deploy/docker/healthcheck.mjs", "/health/ready"]
ENTRYPOINT ["node", "/app/deploy/docker/entrypoint.mjs"]
CMD ["--help"]
