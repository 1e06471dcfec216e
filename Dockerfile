# The SieveMQ gateway image: the locked dependencies, then `sievemq serve`.
FROM python:3.11-slim
WORKDIR /app
RUN pip install --no-cache-dir uv==0.13.8
COPY pyproject.toml uv.lock README.md ./
COPY src ./src
RUN uv sync --frozen --no-dev --no-editable
ENV PATH="/app/.venv/bin:$PATH" \
    SIEVEMQ_DATA_DIR=/var/lib/sievemq
VOLUME ["/var/lib/sievemq"]
EXPOSE 5672 15672
CMD ["sievemq", "serve", "--amqp-host", "0.0.0.0", "--admin-host", "0.0.0.0"]
