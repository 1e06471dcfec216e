# The SieveMQ image: the locked dependencies with the Spark extra (pyspark, pyarrow,
# deltalake) and a Java runtime, so the same image serves and runs `sievemq export`.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
RUN pip install --no-cache-dir uv==0.13.8
COPY pyproject.toml uv.lock README.md ./
COPY src ./src
RUN uv sync --frozen --no-dev --no-editable --extra spark
ENV PATH="/app/.venv/bin:$PATH" \
    SIEVEMQ_DATA_DIR=/var/lib/sievemq
VOLUME ["/var/lib/sievemq"]
EXPOSE 5672 15672
CMD ["sievemq", "serve", "--amqp-host", "0.0.0.0", "--admin-host", "0.0.0.0"]
